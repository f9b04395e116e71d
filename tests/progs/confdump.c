/* confdump: runs libosf.so's configuration file reader (preload/conf.c)
 * for tests/conf_test.go.
 *
 *   confdump PATH MUST_EXIST PROG [OSF_X=v ...]
 *
 * starts from the given snapshot entries, merges the file and prints every
 * entry followed by a NUL byte; on error it prints the message on stderr
 * and exits 1.
 *
 *   confdump -w ORIGIN NAME RULE
 *
 * prints osf_conf_where's answer for an OSF_CONF_ORIGIN value ("" when
 * the value did not come from the file). */
#include "conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	static char env[16384];
	char msg[1024];
	uint32_t len = 0;

	if (argc == 5 && strcmp(argv[1], "-w") == 0) {
		if (osf_conf_where(argv[2], argv[3], atoi(argv[4]), msg,
				   sizeof(msg)) == 0)
			fputs(msg, stdout);
		return 0;
	}
	if (argc < 4) {
		fprintf(stderr, "usage: confdump PATH MUST_EXIST PROG [K=V...]\n");
		return 2;
	}
	for (int i = 4; i < argc; i++) {
		size_t l = strlen(argv[i]) + 1;
		memcpy(env + len, argv[i], l);
		len += (uint32_t)l;
	}
	if (osf_conf_merge(argv[1], atoi(argv[2]), argv[3], env, &len,
			   sizeof(env), msg, sizeof(msg)) < 0) {
		fprintf(stderr, "%s\n", msg);
		return 1;
	}
	fwrite(env, 1, len, stdout);
	return 0;
}
