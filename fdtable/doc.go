// Package fdtable reads the per-process fd table that libosf.so keeps in a
// memfd named "osf-fdtable" (docs/DESIGN.md D3; layout in fdtable.h, the one
// definition shared by C and Go).
//
// libosf.so writes the table (fdtable.c, fdwindow.c, fdfork.c, compiled
// into the library by the Makefile); this package only reads it, from
// outside, for osfstat. Reading
// is passive: the table is mapped read-only and never locked, and a reader
// retries when the owner changed the table while it was being copied.
//
// Example:
//
//	t, err := fdtable.Open(pid)
//	if errors.Is(err, fdtable.ErrNoTable) {
//		// the process never tracked a socket
//	}
//	for _, e := range t.Entries() {
//		fmt.Println(e.FD, e.Kind, e.Transport, e.Reason)
//	}
package fdtable
