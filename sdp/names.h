/* names.h: the abstract AF_UNIX names of companions (the listeners that
 * stand for offloaded kernel TCP listeners), one implementation for
 * libosf.so's listen (preload/setup.c), every dialer (sdp/setup.c's
 * osf_dial_companion) and the Go programs' names (shm, through cgo). The
 * functions are static.
 *
 * A name is "osf1/FAMILY/HOST/PORT" without the leading NUL: FAMILY "4"
 * (IPv4), "6" (IPv6 only) or "46" (a dual-stack IPv6 wildcard listener,
 * which also serves IPv4 clients); HOST the address as Go's netip prints
 * it, "*" for a wildcard. The "osf1/" prefix carries the protocol
 * version: peers of different versions never find each other and use
 * kernel TCP. Addresses here are in IPv6 form (IPv4 v4-mapped). */
#ifndef OSF_SDP_NAMES_H
#define OSF_SDP_NAMES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define OSF_NAME_MAX 128

static const uint8_t osf_name_v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static inline int osf_name_is4(const uint8_t a[16])
{
	return memcmp(a, osf_name_v4mapped, 12) == 0;
}

static inline int osf_name_unspec(const uint8_t a[16])
{
	static const uint8_t zero[16];

	return osf_name_is4(a) ? memcmp(a + 12, zero, 4) == 0 : memcmp(a, zero, 16) == 0;
}

/* osf_name_fmt6 formats an IPv6 address as netip.Addr.String does (RFC
 * 5952: the first longest run of two or more zero groups becomes "::"). */
static inline void osf_name_fmt6(const uint8_t *a, char *out, size_t n)
{
	int g[8], i, best = -1, bestlen = 0, run = 0;
	size_t o = 0;

	for (i = 0; i < 8; i++)
		g[i] = a[2 * i] << 8 | a[2 * i + 1];
	for (i = 0; i <= 8; i++) {
		if (i < 8 && g[i] == 0) {
			run++;
			continue;
		}
		if (run >= 2 && run > bestlen) {
			best = i - run;
			bestlen = run;
		}
		run = 0;
	}
	out[0] = 0;
	for (i = 0; i < 8 && o < n; i++) {
		if (i == best) {
			o += (size_t)snprintf(out + o, n - o, "::");
			i += bestlen - 1;
			continue;
		}
		o += (size_t)snprintf(out + o, n - o, "%s%x",
				      (i > 0 && i != best + bestlen) ? ":" : "", g[i]);
	}
}

/* osf_name_host is HOST: "*", dotted IPv4, or IPv6 as netip prints it. */
static inline void osf_name_host(const uint8_t a[16], char *out, size_t n)
{
	if (osf_name_unspec(a))
		snprintf(out, n, "*");
	else if (osf_name_is4(a))
		snprintf(out, n, "%u.%u.%u.%u", a[12], a[13], a[14], a[15]);
	else
		osf_name_fmt6(a, out, n);
}

/* osf_listen_name is the name of the companion of a listener bound to
 * a:port; v6only is IPV6_V6ONLY of an IPv6 listener. */
static inline void osf_listen_name(const uint8_t a[16], uint16_t port, int v6only, char *out,
			    size_t n)
{
	char h[64];

	osf_name_host(a, h, sizeof(h));
	if (osf_name_is4(a))
		snprintf(out, n, "osf1/4/%s/%u", h, port);
	else if (osf_name_unspec(a) && !v6only)
		snprintf(out, n, "osf1/46/*/%u", port);
	else
		snprintf(out, n, "osf1/6/%s/%u", h, port);
}

/* osf_slot_name is the name of member slot of a SO_REUSEPORT group of
 * companions named name: slot 0 is name itself, slot i name followed by
 * "/r<i>". OSF_SLOT_MAX bounds the members that get a companion. */
#define OSF_SLOT_MAX 64u
static inline void osf_slot_name(const char *name, unsigned slot, char *out, size_t n)
{
	if (slot == 0)
		snprintf(out, n, "%s", name);
	else
		snprintf(out, n, "%s/r%u", name, slot);
}

/* osf_dial_names puts in out, in order, the names of the companions that
 * could serve a connection to a:port: a listener bound to a itself and,
 * when a is an address of this host (local), wildcard listeners of its
 * family and dual-stack ones; wild[i] says the name is a wildcard's
 * (only a wildcard listener has it). Returns how many (1 to 3). */
static inline int osf_dial_names(const uint8_t a[16], uint16_t port, int local,
			  char out[3][OSF_NAME_MAX], int wild[3])
{
	const char *fam = osf_name_is4(a) ? "4" : "6";
	char h[64];
	int n = 0;

	osf_name_host(a, h, sizeof(h));
	snprintf(out[n], OSF_NAME_MAX, "osf1/%s/%s/%u", fam, h, port);
	wild[n++] = osf_name_unspec(a);
	if (local) {
		if (!osf_name_unspec(a)) {
			snprintf(out[n], OSF_NAME_MAX, "osf1/%s/*/%u", fam, port);
			wild[n++] = 1;
		}
		snprintf(out[n], OSF_NAME_MAX, "osf1/46/*/%u", port);
		wild[n++] = 1;
	}
	return n;
}

#endif
