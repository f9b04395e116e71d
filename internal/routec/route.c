/* route.c: internal/policy's configuration parser and route decision in C
 * (see route.h). Each function names the Go function it mirrors; change
 * both together (internal/routec's fuzz test holds them to each other). */
#include "route.h"

#include <arpa/inet.h>
#include <string.h>

#define MIN_RING (4u << 10)
#define MAX_RING (64u << 20)

/* parse_uint is policy.parseUint: digits only, lo..hi; 0 or -1. */
static int parse_uint(const char *s, size_t n, uint64_t lo, uint64_t hi,
		      uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0)
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v <= hi)
			v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

static int has_high(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] >= 0x80)
			return 1;
	return 0;
}

/* eq is s[0:n] == lit. */
static int eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* eq_fold is strings.EqualFold for ASCII s (the caller rules out others). */
static int eq_fold(const char *s, size_t n, const char *lit)
{
	size_t i;

	if (strlen(lit) != n)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != lit[i])
			return 0;
	}
	return 1;
}

/* ---- path.Match, for ASCII patterns and names ------------------------- */

struct str {
	const char *p;
	size_t n;
};

static void scan_chunk(struct str *pat, int *star, struct str *chunk)
{
	int inrange = 0;
	size_t i;

	*star = 0;
	while (pat->n > 0 && pat->p[0] == '*') {
		pat->p++;
		pat->n--;
		*star = 1;
	}
	for (i = 0; i < pat->n; i++) {
		char c = pat->p[i];
		if (c == '\\') {
			if (i + 1 < pat->n)
				i++;
		} else if (c == '[') {
			inrange = 1;
		} else if (c == ']') {
			inrange = 0;
		} else if (c == '*' && !inrange) {
			break;
		}
	}
	chunk->p = pat->p;
	chunk->n = i;
	pat->p += i;
	pat->n -= i;
}

/* get_esc is path.getEsc; -1 on a bad pattern. */
static int get_esc(struct str *c, int *r)
{
	if (c->n == 0 || c->p[0] == '-' || c->p[0] == ']')
		return -1;
	if (c->p[0] == '\\') {
		c->p++;
		c->n--;
		if (c->n == 0)
			return -1;
	}
	*r = (unsigned char)c->p[0];
	c->p++;
	c->n--;
	return c->n == 0 ? -1 : 0;
}

/* match_chunk is path.matchChunk: 1 matched (rest in *s), 0 not, -1 bad
 * pattern. */
static int match_chunk(struct str chunk, struct str *s)
{
	int failed = 0;

	while (chunk.n > 0) {
		failed = failed || s->n == 0;
		switch (chunk.p[0]) {
		case '[': {
			int r = 0, negated = 0, match = 0, nrange = 0;
			if (!failed) {
				r = (unsigned char)s->p[0];
				s->p++;
				s->n--;
			}
			chunk.p++;
			chunk.n--;
			if (chunk.n > 0 && chunk.p[0] == '^') {
				negated = 1;
				chunk.p++;
				chunk.n--;
			}
			for (;;) {
				int lo, hi;
				if (chunk.n > 0 && chunk.p[0] == ']' && nrange > 0) {
					chunk.p++;
					chunk.n--;
					break;
				}
				if (get_esc(&chunk, &lo) < 0)
					return -1;
				hi = lo;
				if (chunk.p[0] == '-') {
					chunk.p++;
					chunk.n--;
					if (get_esc(&chunk, &hi) < 0)
						return -1;
				}
				match = match || (lo <= r && r <= hi);
				nrange++;
			}
			failed = failed || match == negated;
			break;
		}
		case '?':
			if (!failed) {
				failed = s->p[0] == '/';
				s->p++;
				s->n--;
			}
			chunk.p++;
			chunk.n--;
			break;
		case '\\':
			chunk.p++;
			chunk.n--;
			if (chunk.n == 0)
				return -1;
			/* fall through */
		default:
			if (!failed) {
				failed = chunk.p[0] != s->p[0];
				s->p++;
				s->n--;
			}
			chunk.p++;
			chunk.n--;
		}
	}
	return failed ? 0 : 1;
}

/* path_match is path.Match: 1, 0, or -1 for a bad pattern. */
static int path_match(const char *pattern, const char *name)
{
	struct str pat = {pattern, strlen(pattern)}, nm = {name, strlen(name)};

	while (pat.n > 0) {
		struct str chunk, t;
		int star, ok;
		scan_chunk(&pat, &star, &chunk);
		if (star && chunk.n == 0)
			return memchr(nm.p, '/', nm.n) == NULL;
		t = nm;
		ok = match_chunk(chunk, &t);
		if (ok == 1 && (t.n == 0 || pat.n > 0)) {
			nm = t;
			continue;
		}
		if (ok < 0)
			return -1;
		if (star) {
			size_t i;
			int again = 0;
			for (i = 0; i < nm.n && nm.p[i] != '/'; i++) {
				t.p = nm.p + i + 1;
				t.n = nm.n - i - 1;
				ok = match_chunk(chunk, &t);
				if (ok == 1) {
					if (pat.n == 0 && t.n > 0)
						continue;
					nm = t;
					again = 1;
					break;
				}
				if (ok < 0)
					return -1;
			}
			if (again)
				continue;
		}
		while (pat.n > 0) {
			struct str empty = {"", 0};
			scan_chunk(&pat, &star, &chunk);
			if (match_chunk(chunk, &empty) < 0)
				return -1;
		}
		return 0;
	}
	return nm.n == 0;
}

/* ---- rules ----------------------------------------------------------- */

/* parse_addr parses text (no zone) as an IP address: 4 (IPv4 in out[0..3]),
 * 6, or 0 when it is not one (netip.ParseAddr). */
static int parse_addr(const char *s, size_t n, uint8_t out[16])
{
	char buf[64];
	size_t i;

	if (n == 0 || n >= sizeof(buf))
		return 0;
	memcpy(buf, s, n);
	buf[n] = 0;
	for (i = 0; i < n; i++) {
		if (buf[i] == '.')
			return inet_pton(AF_INET, buf, out) == 1 ? 4 : 0;
		if (buf[i] == ':')
			return inet_pton(AF_INET6, buf, out) == 1 ? 6 : 0;
		if (buf[i] == '%')
			return 0;
	}
	return 0;
}

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void mask(uint8_t *a, int nbytes, int bits)
{
	int i;

	for (i = 0; i < nbytes; i++) {
		int keep = bits - i * 8;
		if (keep >= 8)
			continue;
		a[i] = keep <= 0 ? 0 : (uint8_t)(a[i] & (0xff << (8 - keep)));
	}
}

/* parse_prefix is policy.parsePrefix. */
static int parse_prefix(const char *s, size_t n, int v6, struct osf_route_rule *r)
{
	const char *slash = memchr(s, '/', n);
	size_t tn = slash ? (size_t)(slash - s) : n;
	uint8_t a[16];
	int fam, bits;
	uint64_t b;

	if (memchr(s, '%', tn))
		return -1; /* a zone, or no address */
	fam = parse_addr(s, tn, a);
	if (fam == 0 || (fam == 6) != v6)
		return -1;
	bits = fam == 6 ? 128 : 32;
	if (slash) {
		if (parse_uint(slash + 1, n - tn - 1, 0, (uint64_t)bits, &b) < 0)
			return -1;
		bits = (int)b;
	}
	memset(r->addr, 0, sizeof(r->addr));
	if (fam == 6 && memcmp(a, v4mapped, 12) == 0 && bits >= 96) {
		memcpy(r->addr, a + 12, 4);
		fam = 4;
		bits -= 96;
	} else {
		memcpy(r->addr, a, fam == 6 ? 16 : 4);
	}
	r->v6 = fam == 6;
	r->bits = (uint8_t)bits;
	mask(r->addr, r->v6 ? 16 : 4, bits);
	return 0;
}

static int parse_port(const char *s, size_t n, uint16_t *p)
{
	uint64_t v;

	if (parse_uint(s, n, 1, 65535, &v) < 0)
		return -1;
	*p = (uint16_t)v;
	return 0;
}

/* parse_ports is policy.parsePorts. */
static int parse_ports(const char *s, size_t n, struct osf_route_rule *r)
{
	const char *dash;

	if (eq(s, n, "*"))
		return 0;
	dash = memchr(s, '-', n);
	if (!dash)
		return parse_port(s, n, &r->first) < 0 ? -1 : (r->last = r->first, 0);
	if (parse_port(s, (size_t)(dash - s), &r->first) < 0 ||
	    parse_port(dash + 1, n - (size_t)(dash - s) - 1, &r->last) < 0 ||
	    r->first > r->last)
		return -1;
	return 0;
}

/* parse_target is policy.Rule.parseTarget. */
static int parse_target(const char *s, size_t n, struct osf_route_rule *r)
{
	const char *ports = NULL;
	size_t pn = 0, i, colons = 0;

	for (i = 0; i < n; i++)
		colons += s[i] == ':';
	if (n > 0 && s[0] == '[') {
		const char *end = memchr(s, ']', n);
		size_t rest;
		if (!end)
			return -1;
		rest = n - (size_t)(end - s) - 1;
		if (rest > 0) {
			if (end[1] != ':')
				return -1;
			ports = end + 2;
			pn = rest - 1;
		}
		if (parse_prefix(s + 1, (size_t)(end - s) - 1, 1, r) < 0)
			return -1;
	} else if (colons >= 2) {
		if (parse_prefix(s, n, 1, r) < 0)
			return -1;
	} else {
		const char *c = memchr(s, ':', n);
		size_t an = c ? (size_t)(c - s) : n;
		if (c) {
			ports = c + 1;
			pn = n - an - 1;
		}
		if (eq(s, an, "*"))
			r->any_addr = 1;
		else if (eq(s, an, "local"))
			r->local = 1;
		else if (parse_prefix(s, an, 0, r) < 0)
			return -1;
	}
	return ports ? parse_ports(ports, pn, r) : 0;
}

/* parse_rule is policy.parseRule for one rule's text; OSF_ROUTE_*. */
static int parse_rule(const char *s, size_t n, struct osf_route_rule *r)
{
	struct str f[5];
	int nf = 0;
	size_t i = 0;

	memset(r, 0, sizeof(*r));
	r->role = OSF_ROUTE_CLIENT | OSF_ROUTE_SERVER;
	strcpy(r->prog, "*");
	while (i < n) {
		size_t st;
		while (i < n && is_blank(s[i]))
			i++;
		if (i >= n)
			break;
		st = i;
		while (i < n && !is_blank(s[i]))
			i++;
		if (nf < 5) {
			f[nf].p = s + st;
			f[nf].n = i - st;
		}
		nf++;
	}
	if (eq(f[0].p, f[0].n, "gateway"))
		return OSF_ROUTE_UNSUPPORTED; /* gateway rules: the core's */
	if (eq(f[0].p, f[0].n, "offload"))
		r->offload = 1;
	else if (!eq(f[0].p, f[0].n, "kernel"))
		return OSF_ROUTE_MALFORMED;
	if (nf == 1 || nf > 4)
		return OSF_ROUTE_MALFORMED;
	if (parse_target(f[nf - 1].p, f[nf - 1].n, r) < 0)
		return OSF_ROUTE_MALFORMED;
	if (nf >= 3) {
		if (eq(f[1].p, f[1].n, "client"))
			r->role = OSF_ROUTE_CLIENT;
		else if (eq(f[1].p, f[1].n, "server"))
			r->role = OSF_ROUTE_SERVER;
		else if (!eq(f[1].p, f[1].n, "both"))
			return OSF_ROUTE_MALFORMED;
	}
	if (nf == 4) {
		if (has_high(f[2].p, f[2].n) || f[2].n > OSF_ROUTE_MAX_GLOB)
			return OSF_ROUTE_UNSUPPORTED;
		memcpy(r->prog, f[2].p, f[2].n);
		r->prog[f[2].n] = 0;
		if (memchr(f[2].p, 0, f[2].n))
			return OSF_ROUTE_UNSUPPORTED;
		if (path_match(r->prog, "") < 0 || strchr(r->prog, '/'))
			return OSF_ROUTE_MALFORMED;
	}
	return OSF_ROUTE_OK;
}

/* parse_routes is policy.ParseRoutes. */
static int parse_routes(const char *s, size_t n, struct osf_route_config *c)
{
	size_t ls = 0;

	c->nrules = 0;
	while (ls <= n) {
		const char *nl = memchr(s + ls, '\n', n - ls);
		size_t le = nl ? (size_t)(nl - s) : n, hash, es;
		const char *h = memchr(s + ls, '#', le - ls);
		hash = h ? (size_t)(h - s) : le;
		es = ls;
		while (es <= hash) {
			const char *semi = memchr(s + es, ';', hash - es);
			size_t ee = semi ? (size_t)(semi - s) : hash, a = es, b = ee;
			int rc;
			while (a < b && is_blank(s[a]))
				a++;
			while (b > a && is_blank(s[b - 1]))
				b--;
			if (b > a) {
				if (c->nrules >= OSF_ROUTE_MAX_RULES)
					return OSF_ROUTE_UNSUPPORTED;
				rc = parse_rule(s + a, b - a, &c->rules[c->nrules]);
				if (rc != OSF_ROUTE_OK)
					return rc;
				c->nrules++;
			}
			es = ee + 1;
		}
		ls = le + 1;
	}
	return OSF_ROUTE_OK;
}

static const char default_routes[] = "kernel both * *:53; offload both * local";

/* parse_ring_size is policy.parseRingSize. */
static int parse_ring_size(const char *v, size_t n, uint32_t *out)
{
	uint64_t unit = 1, x;
	size_t dn = n;

	if (n > 0) {
		char last = v[n - 1];
		if (last == 'K' || last == 'k')
			unit = 1u << 10, dn = n - 1;
		else if (last == 'M' || last == 'm')
			unit = 1u << 20, dn = n - 1;
	}
	if (parse_uint(v, dn, 0, MAX_RING, &x) < 0)
		return -1;
	x *= unit;
	if (x < MIN_RING || x > MAX_RING || (x & (x - 1)) != 0)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static int parse_bool(const char *v, size_t n, int *out)
{
	if (eq(v, n, "0") || eq(v, n, "1")) {
		*out = v[0] == '1';
		return 0;
	}
	return -1;
}

/* lookup finds the first "NAME=" (or a bare "NAME") entry of env. */
static int lookup(const char *env, uint32_t len, const char *name,
		  const char **v, size_t *vn)
{
	size_t nl = strlen(name);
	const char *p = env, *end = env + len;

	while (p < end) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		size_t l = z ? (size_t)(z - p) : (size_t)(end - p);
		const char *eqs = memchr(p, '=', l);
		size_t kn = eqs ? (size_t)(eqs - p) : l;
		if (kn == nl && memcmp(p, name, nl) == 0) {
			*v = eqs ? eqs + 1 : p + l;
			*vn = eqs ? l - kn - 1 : 0;
			return 1;
		}
		p += l + 1;
	}
	return 0;
}

int osf_route_parse(const char *env, uint32_t len, struct osf_route_config *c)
{
	const char *v;
	size_t n;
	uint64_t x;
	int b;
	int rc;

	memset(c, 0, sizeof(*c));
	c->mode = OSF_MODE_AUTO;
	c->log_level = OSF_LOGL_ERROR;
	c->ring_size = 1u << 20;
	c->connect_timeout_ms = 1000;
	c->default_routes = 1;
	if (lookup(env, len, "OSF_ROUTES", &v, &n)) {
		c->default_routes = 0;
		if ((rc = parse_routes(v, n, c)) != OSF_ROUTE_OK)
			return rc;
	} else {
		(void)parse_routes(default_routes, sizeof(default_routes) - 1, c);
	}
	if (lookup(env, len, "OSF_TRANSPORT", &v, &n)) {
		static const char *modes[] = {"auto", "shm", "rdma", "kernel"};
		int m;
		if (has_high(v, n))
			return OSF_ROUTE_UNSUPPORTED; /* Unicode case folding */
		for (m = 0; m < 4 && !eq_fold(v, n, modes[m]); m++)
			;
		if (m == 4)
			return OSF_ROUTE_MALFORMED;
		c->mode = m;
	}
	if (lookup(env, len, "OSF_STRICT", &v, &n) && parse_bool(v, n, &c->strict) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_LOG_LEVEL", &v, &n)) {
		if (has_high(v, n))
			return OSF_ROUTE_UNSUPPORTED;
		if (eq_fold(v, n, "debug"))
			c->log_level = OSF_LOGL_DEBUG;
		else if (eq_fold(v, n, "info"))
			c->log_level = OSF_LOGL_INFO;
		else if (eq_fold(v, n, "warn"))
			c->log_level = OSF_LOGL_WARN;
		else if (eq_fold(v, n, "error"))
			c->log_level = OSF_LOGL_ERROR;
		else
			return OSF_ROUTE_MALFORMED;
	}
	if (lookup(env, len, "OSF_LOG_FILE", &v, &n))
		c->log_file = n > 0;
	if (lookup(env, len, "OSF_RING_SIZE", &v, &n) &&
	    parse_ring_size(v, n, &c->ring_size) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_SPIN_US", &v, &n) &&
	    parse_uint(v, n, 0, 1000000, &x) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_POLL_SPIN_US", &v, &n) &&
	    parse_uint(v, n, 0, 1000000, &x) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_RDMA_POLL_US", &v, &n) &&
	    parse_uint(v, n, 0, 1000000, &x) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_RDMA_RX", &v, &n) &&
	    !(n == 6 && memcmp(v, "engine", 6) == 0) && !(n == 6 && memcmp(v, "caller", 6) == 0))
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_RDMA_LINKS", &v, &n) && parse_bool(v, n, &b) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_CONNECT_TIMEOUT_MS", &v, &n)) {
		if (parse_uint(v, n, 1, 60000, &x) < 0)
			return OSF_ROUTE_MALFORMED;
		c->connect_timeout_ms = (uint32_t)x;
	}
	if (lookup(env, len, "OSF_GATEWAY_TIMEOUT_MS", &v, &n) &&
	    parse_uint(v, n, 1, 600000, &x) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_DEBUG_LOAD_CORE", &v, &n) &&
	    parse_bool(v, n, &c->debug_load_core) < 0)
		return OSF_ROUTE_MALFORMED;
	if (lookup(env, len, "OSF_DEBUG_RDMA_SIM", &v, &n) &&
	    parse_bool(v, n, &c->debug_rdma_sim) < 0)
		return OSF_ROUTE_MALFORMED;
	return OSF_ROUTE_OK;
}

/* ---- decisions ------------------------------------------------------- */

static int is_unspec(int v4, const uint8_t *a)
{
	static const uint8_t zero[16];

	return memcmp(a, zero, v4 ? 4 : 16) == 0;
}

static int is_loop(int v4, const uint8_t *a)
{
	static const uint8_t one[16] = {[15] = 1};

	return v4 ? a[0] == 127 : memcmp(a, one, 16) == 0;
}

/* q_local is policy.Query.isLocal. */
static int q_local(const struct osf_route_query *q, int v4, const uint8_t *a)
{
	return is_loop(v4, a) || is_unspec(v4, a) ||
	       (q->is_local && q->is_local(v4, a, q->arg));
}

static int prefix_contains(const struct osf_route_rule *r, int v4,
			   const uint8_t *a)
{
	uint8_t m[16];

	if (r->v6 == v4)
		return 0;
	memcpy(m, a, v4 ? 4 : 16);
	mask(m, v4 ? 4 : 16, r->bits);
	return memcmp(m, r->addr, v4 ? 4 : 16) == 0;
}

/* rule_hit is policy.Rule.check == hit; -1: cannot tell in C. */
static int rule_hit(const struct osf_route_rule *r, const struct osf_route_query *q,
		    int role, int v4, const uint8_t *a)
{
	if (!(r->role & role))
		return 0;
	if (strcmp(r->prog, "*") != 0 && q->prog && q->prog[0]) {
		if (has_high(q->prog, strlen(q->prog)))
			return -1;
		if (path_match(r->prog, q->prog) != 1)
			return 0;
	}
	if (!(r->first == 0 && r->last == 0) &&
	    (q->port < r->first || q->port > r->last))
		return 0;
	if (r->any_addr)
		return 1;
	if (role == OSF_ROUTE_SERVER && is_unspec(v4, a))
		return 1;
	if (r->local)
		return q_local(q, v4, a);
	return prefix_contains(r, v4, a);
}

void osf_route_decide(const struct osf_route_config *c,
		      const struct osf_route_query *q,
		      struct osf_route_decision *d)
{
	int role = q->role == OSF_ROUTE_SERVER ? OSF_ROUTE_SERVER : OSF_ROUTE_CLIENT;
	int v4 = q->v4, i, offload = 0, shm_ok, rdma_ok, local;
	uint8_t a[16];

	memset(d, 0, sizeof(*d));
	d->transport = OSF_ROUTE_KERNEL;
	if (!v4 && memcmp(q->addr, v4mapped, 12) == 0) {
		memcpy(a, q->addr + 12, 4);
		v4 = 1;
	} else {
		memcpy(a, q->addr, v4 ? 4 : 16);
	}
	for (i = 0; i < c->nrules; i++) {
		int h = rule_hit(&c->rules[i], q, role, v4, a);
		if (h < 0) {
			d->need_go = 1;
			return;
		}
		if (h) {
			d->rule = i + 1;
			offload = c->rules[i].offload;
			break;
		}
	}
	shm_ok = c->mode == OSF_MODE_AUTO || c->mode == OSF_MODE_SHM;
	rdma_ok = c->mode == OSF_MODE_AUTO || c->mode == OSF_MODE_RDMA;
	if (!offload) {
		d->reason = d->rule == 0 ? 2 /* no rule */ : 1 /* rule */;
		return;
	}
	if (c->mode == OSF_MODE_KERNEL) {
		d->reason = 9; /* OSF_TRANSPORT=kernel */
		return;
	}
	if (role == OSF_ROUTE_SERVER) { /* policy decideServer */
		if (shm_ok)
			d->transport = OSF_ROUTE_SHM;
		if (!rdma_ok)
			return;
		if (!q->rdma_absent) {
			d->need_go = 1;
			return;
		}
		if (c->mode == OSF_MODE_RDMA) {
			d->reason = 4; /* no RDMA device */
			d->detail = OSF_ROUTE_NO_DEVICE;
		}
		return;
	}
	local = q_local(q, v4, a);
	if (local && shm_ok) { /* decideLocal */
		d->transport = OSF_ROUTE_SHM;
		return;
	}
	if (!local && !rdma_ok) { /* decideRemote */
		d->reason = 14; /* shm only, peer remote */
		return;
	}
	if (!q->rdma_absent) { /* useRDMA */
		d->need_go = 1;
		return;
	}
	d->reason = 4;
	d->detail = OSF_ROUTE_NO_DEVICE;
}

int osf_route_fallback(int reason)
{
	switch (reason) {
	case 3: case 4: case 5: case 7: case 8: case 11: case 14:
		return 1;
	}
	return 0;
}
