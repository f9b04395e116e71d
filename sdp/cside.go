package sdp

// The stream protocol's C side (side.c, lock.c, with the plain libc
// system calls of syslibc.c) is compiled by cgo as part of this package,
// from the same files libosf.so is built from: a Go program that needs it
// (osfgw's ring relay, the unit tests in sdp/sidetest) imports this
// package and includes side.h, and the Go build cache rebuilds it whenever
// one of those files changes (and the importer whenever a header does:
// headers.go).

/*
#cgo CFLAGS: -O2 -std=gnu11 -D_GNU_SOURCE -fno-strict-aliasing -DOSF_LOCK_TLS_GD
*/
import "C"
