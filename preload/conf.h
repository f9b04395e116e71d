/* conf.h: reading the configuration file (/etc/osf.conf or $OSF_CONF) into
 * the configuration snapshot. Self-contained (libc only), so that a test
 * program can run the same code against internal/policy's reader. */
#ifndef OSF_CONF_H
#define OSF_CONF_H

#include <stddef.h>
#include <stdint.h>

/* OSF_CONF_DEFAULT is the file read when OSF_CONF is unset
 * (policy.DefaultConfFile). */
#define OSF_CONF_DEFAULT "/etc/osf.conf"

/* osf_conf_merge reads the configuration file at path for program prog and
 * appends to the snapshot env ("K=V\0...", *len bytes of cap used) what
 * policy.File.Merge appends: each variable the file sets for prog that env
 * lacks, OSF_ROUTES from the file's rule lines, and OSF_CONF_ORIGIN. A
 * missing file is no error unless must_exist. On error it returns -1 with
 * msg holding "path[:line]: reason[: \"text\"]" (policy.FileError's text
 * without "osf: "), and leaves env unchanged. */
int osf_conf_merge(const char *path, int must_exist, const char *prog,
		   char *env, uint32_t *len, size_t cap, char *msg, size_t msgn);

/* osf_conf_where writes "path:line" of the file line that set variable
 * name (for OSF_ROUTES, of rule number rule, counting from 1) into buf,
 * given the snapshot's OSF_CONF_ORIGIN value (NULL: none), as
 * policy.Config.Where does; it returns 0, or -1 when the value did not
 * come from the file. */
int osf_conf_where(const char *origin, const char *name, int rule, char *buf,
		   size_t n);

#endif
