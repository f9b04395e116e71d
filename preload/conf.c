//go:build osf_make

/* conf.c: the configuration file, merged into the snapshot by the
 * constructor (init.c) so that the C data path and the Go core see one
 * configuration. The syntax and the merge are internal/policy's (file.go);
 * tests/conf_test.go runs both readers on the same files and compares. */
#include "conf.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONF_MAX_BYTES (1 << 20)

/* The variables a file may set: policy's variables without OSF_ROUTES
 * (rules are lines of their own), OSF_CONF, OSF_CONF_ORIGIN, OSF_LIB and
 * OSF_FDTABLE. tests/conf_test.go checks the list against policy.Vars. */
static const char *const file_vars[] = {
	"OSF_TRANSPORT",	  "OSF_STRICT",	      "OSF_LOG_LEVEL",
	"OSF_LOG_FILE",		  "OSF_RING_SIZE",    "OSF_SPIN_US",
	"OSF_POLL_SPIN_US",	  "OSF_RDMA_POLL_US", "OSF_RDMA_RX",
	"OSF_RDMA_LINKS",	  "OSF_CONNECT_TIMEOUT_MS",
	"OSF_GATEWAY_KEY",	  "OSF_GATEWAY_TIMEOUT_MS",
	"OSF_GO",		  "OSF_SHM_POOL",	  "OSF_SHM_DEFER",	  "OSF_SHM_KFD",	  "OSF_SHM_EFD",	  "OSF_REAP_BLOCKING",	  "OSF_DEBUG_TRIM_STOP",
	"OSF_DEBUG_REAP_SLOW",	  "OSF_DEBUG_LOAD_CORE",    "OSF_DEBUG_CORE_AT_SETUP",
	"OSF_DEBUG_RDMA_SIM",	  "OSF_DEBUG_RDMA_WATCH_MS",
};
#define NVARS (sizeof(file_vars) / sizeof(file_vars[0]))

struct line {
	int no;
	const char *section; /* program glob; NULL is global */
	int var;	     /* index in file_vars; -1 for a rule */
	char *value;	     /* the value, or the rule's text */
};

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* strip removes a comment ('#' first or after a blank) and surrounding
 * blanks from the NUL-terminated line s, in place. */
static char *strip(char *s)
{
	char *e;

	for (e = s; *e; e++)
		if (*e == '#' && (e == s || blank(e[-1]))) {
			*e = 0;
			break;
		}
	while (blank(*s))
		s++;
	e = s + strlen(s);
	while (e > s && blank(e[-1]))
		*--e = 0;
	return s;
}

/* quote appends text quoted as Go's strconv.Quote does for ASCII. */
static void quote(char *buf, size_t n, const char *text)
{
	size_t k = strlen(buf);

	if (k + 1 < n)
		buf[k++] = '"';
	for (const unsigned char *p = (const unsigned char *)text;
	     *p && k + 6 < n; p++) {
		if (*p == '"' || *p == '\\')
			k += (size_t)snprintf(buf + k, n - k, "\\%c", *p);
		else if (*p == '\t')
			k += (size_t)snprintf(buf + k, n - k, "\\t");
		else if (*p == '\r')
			k += (size_t)snprintf(buf + k, n - k, "\\r");
		else if (*p < 0x20 || *p == 0x7f)
			k += (size_t)snprintf(buf + k, n - k, "\\x%02x", *p);
		else
			buf[k++] = (char)*p;
	}
	if (k + 1 < n)
		buf[k++] = '"';
	buf[k] = 0;
}

static int fail(char *msg, size_t n, const char *path, int no,
		const char *text, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static int fail(char *msg, size_t n, const char *path, int no,
		const char *text, const char *fmt, ...)
{
	va_list ap;
	size_t k;

	if (no)
		snprintf(msg, n, "%s:%d: ", path, no);
	else
		snprintf(msg, n, "%s: ", path);
	k = strlen(msg);
	va_start(ap, fmt);
	vsnprintf(msg + k, n - k, fmt, ap);
	va_end(ap);
	if (text) {
		k = strlen(msg);
		snprintf(msg + k, n - k, ": ");
		quote(msg, n, text);
	}
	return -1;
}

static int glob_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("._+@:-*?", c));
}

/* section parses "[program GLOB]" or "[global]" in s (modified); it
 * returns the glob, NULL for global, or "" with a reason in *why. */
static const char *section(char *s, const char **why)
{
	size_t l = strlen(s);
	char *f[3];
	int nf = 0;

	if (s[l - 1] != ']')
		return *why = "missing ']'", "";
	s[l - 1] = 0;
	for (char *p = s + 1; *p;) {
		while (blank(*p))
			p++;
		if (!*p)
			break;
		if (nf == 3)
			break;
		f[nf++] = p;
		while (*p && !blank(*p))
			p++;
		if (*p)
			*p++ = 0;
	}
	if (nf == 1 && strcmp(f[0], "global") == 0)
		return NULL;
	if (nf != 2 || strcmp(f[0], "program") != 0)
		return *why = "want [program GLOB] or [global]", "";
	for (const char *p = f[1]; *p; p++)
		if (!glob_char(*p)) {
			static char bad[160];
			snprintf(bad, sizeof(bad),
				 "character '%c' in program glob, want letters, "
				 "digits, . _ + @ : - and the wildcards * ?",
				 *p);
			return *why = bad, "";
		}
	return f[1];
}

static int is_rule(const char *s)
{
	size_t w = strcspn(s, " \t");
	return (w == 7 && strncmp(s, "offload", 7) == 0) ||
	       (w == 6 && strncmp(s, "kernel", 6) == 0) ||
	       (w == 7 && strncmp(s, "gateway", 7) == 0);
}

static int file_var(const char *name)
{
	for (size_t i = 0; i < NVARS; i++)
		if (strcmp(file_vars[i], name) == 0)
			return (int)i;
	return -1;
}

/* parse splits the file text into lines; it returns the count, or -1. */
static int parse(const char *path, char *text, struct line *out, char *msg,
		 size_t msgn)
{
	const char *sec = NULL;
	int count = 0, no = 0;
	char *next;

	for (char *raw = text; raw; raw = next) {
		char *s, *eq, *name;
		next = strchr(raw, '\n');
		if (next)
			*next++ = 0;
		no++;
		s = strip(raw);
		if (!*s)
			continue;
		if (*s == '[') {
			char copy[strlen(s) + 1];
			const char *why = NULL, *g;
			memcpy(copy, s, sizeof(copy));
			g = section(s, &why);
			if (why)
				return fail(msg, msgn, path, no, copy, "%s",
					    why);
			sec = g;
		} else if (strncmp(s, "OSF_", 4) == 0) {
			eq = strchr(s, '=');
			if (!eq)
				return fail(msg, msgn, path, no, s,
					    "missing '=', want OSF_NAME = "
					    "value");
			char copy[strlen(s) + 1];
			memcpy(copy, s, sizeof(copy));
			*eq = 0;
			name = strip(s);
			out[count].var = file_var(name);
			if (out[count].var < 0) {
				if (strcmp(name, "OSF_ROUTES") == 0)
					return fail(msg, msgn, path, no, copy,
						    "write route rules as lines "
						    "of their own "
						    "(offload|kernel ...), not "
						    "OSF_ROUTES");
				return fail(msg, msgn, path, no, copy,
					    "unknown variable %s", name);
			}
			out[count].value = strip(eq + 1);
			out[count].no = no;
			out[count++].section = sec;
		} else if (is_rule(s)) {
			if (strchr(s, ';'))
				return fail(msg, msgn, path, no, s,
					    "one rule per line (';' is not "
					    "allowed in the file)");
			out[count++] = (struct line){no, sec, -1, s};
		} else {
			return fail(msg, msgn, path, no, s,
				    "want OSF_NAME = value, a rule "
				    "(offload|kernel ...), [program GLOB] or "
				    "[global]");
		}
	}
	return count;
}

static int has_var(const char *env, uint32_t len, const char *name)
{
	size_t nl = strlen(name);

	for (const char *p = env; p < env + len; p += strlen(p) + 1)
		if (strncmp(p, name, nl) == 0 && p[nl] == '=')
			return 1;
	return 0;
}

/* struct out builds the entries to append. */
struct out {
	char *buf;
	size_t len, cap;
	int overflow;
};

static void put(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len)
		o->overflow = 1;
	else
		o->len += (size_t)n;
}

static void end_entry(struct out *o)
{
	if (o->len < o->cap)
		o->buf[o->len++] = 0;
	else
		o->overflow = 1;
}

static int applies(const struct line *l, const char *prog)
{
	return !l->section || fnmatch(l->section, prog, 0) == 0;
}

static char *read_file(const char *path, int must_exist, char *msg,
		       size_t msgn, int *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	struct stat st;
	char *text;

	*err = 0;
	if (fd < 0) {
		if (errno == ENOENT && !must_exist)
			return NULL;
		*err = fail(msg, msgn, path, 0, NULL, "cannot read: %s",
			    strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > CONF_MAX_BYTES) {
		close(fd);
		*err = fail(msg, msgn, path, 0, NULL,
			    "cannot read: not a regular file of at most %d "
			    "bytes",
			    CONF_MAX_BYTES);
		return NULL;
	}
	text = malloc((size_t)st.st_size + 1);
	while (text && got < (size_t)st.st_size) {
		ssize_t r = read(fd, text + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (!text) {
		*err = fail(msg, msgn, path, 0, NULL, "cannot read: %s",
			    strerror(ENOMEM));
		return NULL;
	}
	text[got] = 0;
	return text;
}

int osf_conf_merge(const char *path, int must_exist, const char *prog,
		   char *env, uint32_t *len, size_t cap, char *msg, size_t msgn)
{
	int err, count, rules = 0, best[NVARS], order[NVARS], norder = 0;
	struct out o = {env + *len, 0, cap - *len, 0};
	struct line *lines;
	char *text = read_file(path, must_exist, msg, msgn, &err);

	if (!text)
		return err;
	lines = calloc(strlen(text) / 2 + 2, sizeof(*lines));
	count = lines ? parse(path, text, lines, msg, msgn)
		      : fail(msg, msgn, path, 0, NULL, "cannot read: %s",
			     strerror(ENOMEM));
	if (count < 0)
		goto out;
	/* Each variable: a matching section's line beats a global one; among
	 * equals the later line wins. Order of first appearance. */
	for (size_t v = 0; v < NVARS; v++)
		best[v] = -1;
	for (int i = 0; i < count; i++) {
		struct line *l = &lines[i];
		if (l->var < 0) {
			rules = 1;
			continue;
		}
		if (!applies(l, prog))
			continue;
		if (best[l->var] < 0)
			order[norder++] = l->var;
		else if (lines[best[l->var]].section && !l->section)
			continue;
		best[l->var] = i;
	}
	for (int k = 0; k < norder; k++) {
		int v = order[k];
		if (has_var(env, *len, file_vars[v]))
			continue;
		put(&o, "%s=%s", file_vars[v], lines[best[v]].value);
		end_entry(&o);
	}
	if (rules && !has_var(env, *len, "OSF_ROUTES")) {
		const char *sep = "";
		put(&o, "OSF_ROUTES=");
		for (int i = 0; i < count; i++)
			if (lines[i].var < 0 && applies(&lines[i], prog)) {
				put(&o, "%s%s", sep, lines[i].value);
				sep = "\n";
			}
		end_entry(&o);
	}
	put(&o, "OSF_CONF_ORIGIN=%s", path);
	for (int k = 0; k < norder; k++)
		if (!has_var(env, *len, file_vars[order[k]]))
			put(&o, "\n%s %d", file_vars[order[k]],
			    lines[best[order[k]]].no);
	if (rules && !has_var(env, *len, "OSF_ROUTES")) {
		put(&o, "\nOSF_ROUTES");
		for (int i = 0; i < count; i++)
			if (lines[i].var < 0 && applies(&lines[i], prog))
				put(&o, " %d", lines[i].no);
	}
	end_entry(&o);
	if (o.overflow)
		count = fail(msg, msgn, path, 0, NULL,
			     "too large for the configuration snapshot");
	else
		*len += (uint32_t)o.len;
out:
	free(lines);
	free(text);
	return count < 0 ? -1 : 0;
}

int osf_conf_where(const char *origin, const char *name, int rule, char *buf,
		   size_t n)
{
	size_t nl = strlen(name), pl;
	const char *p;
	int i = strcmp(name, "OSF_ROUTES") == 0 ? rule - 1 : 0;

	if (!origin)
		return -1;
	pl = strcspn(origin, "\n");
	for (p = origin + pl; *p == '\n'; p += strcspn(p + 1, "\n") + 1) {
		const char *q = p + 1 + nl;
		if (strncmp(p + 1, name, nl) != 0 || (*q != ' ' && *q != '\n' && *q))
			continue;
		/* The i-th line number after the name, if any. */
		for (int k = 0; i >= 0 && *q == ' '; k++) {
			if (k == i) {
				snprintf(buf, n, "%.*s:%d", (int)pl, origin,
					 atoi(q + 1));
				return 0;
			}
			q += 1 + strcspn(q + 1, " \n");
		}
		snprintf(buf, n, "%.*s", (int)pl, origin);
		return 0;
	}
	return -1;
}
