/* gwwire.h: the parsers of what an osfgw gateway sends a node (docs/
 * ARCHITECTURE.md, "Protocol (version 1)"): the 32-byte connect reply and
 * the 48-byte notice of a delivered connection. Both come from another
 * process and are hostile input: fixed sizes, checked magic and version,
 * an errno clamped to what an errno can be, addresses copied into fixed
 * sockaddrs. Static inline so that the fuzz targets (internal/peerwire)
 * run the very code libosf.so does. */
#ifndef OSF_GATEWAY_GWWIRE_H
#define OSF_GATEWAY_GWWIRE_H

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define OSF_GW_REPLY_BYTES 32
#define OSF_GW_NOTICE_BYTES 48

/* osf_gw_reply_errno parses a connect reply (OSF_GW_REPLY_BYTES at b): its
 * errno (0: connected), EPROTO when it is not a reply or its errno word is
 * none an errno can be (0..4095). */
static inline int osf_gw_reply_errno(const uint8_t *b)
{
	uint32_t err;

	if (memcmp(b, "OSFA", 4) != 0 || b[4] != 1)
		return EPROTO;
	err = (uint32_t)b[8] << 24 | (uint32_t)b[9] << 16 | (uint32_t)b[10] << 8 | b[11];
	return err < 4096 ? (int)err : EPROTO;
}

/* osf_gw_notice_ok reports whether OSF_GW_NOTICE_BYTES at b are a notice. */
static inline int osf_gw_notice_ok(const uint8_t *b)
{
	return memcmp(b, "OSFN", 4) == 0 && b[4] == 1;
}

/* osf_gw_put_addr stores a notice address (family code fam, 4 or else 6;
 * port, 2 bytes; a, 16 bytes) as a sockaddr of the listener's family
 * (IPv4 as v4-mapped for AF_INET6) in the 28 bytes at dst. */
static inline void osf_gw_put_addr(uint8_t dst[28], int v6, uint8_t fam,
				   const uint8_t *port, const uint8_t *a)
{
	memset(dst, 0, 28);
	if (!v6 && fam == 4) {
		struct sockaddr_in in;
		memset(&in, 0, sizeof(in));
		in.sin_family = AF_INET;
		memcpy(&in.sin_port, port, 2);
		memcpy(&in.sin_addr, a, 4);
		memcpy(dst, &in, sizeof(in));
	} else {
		struct sockaddr_in6 in6;
		memset(&in6, 0, sizeof(in6));
		in6.sin6_family = AF_INET6;
		memcpy(&in6.sin6_port, port, 2);
		if (fam == 4) {
			in6.sin6_addr.s6_addr[10] = in6.sin6_addr.s6_addr[11] = 0xff;
			memcpy(&in6.sin6_addr.s6_addr[12], a, 4);
		} else {
			memcpy(&in6.sin6_addr, a, 16);
		}
		memcpy(dst, &in6, sizeof(in6));
	}
}

#endif
