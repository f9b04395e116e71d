package fdtable

/*
#include "fdscan.h"
*/
import "C"

// scanLooks returns the numbers a look for free fds in [lo, hi) looks at,
// in order (fdscan.h, fdwindow.c free_in): from from, the first look of
// first numbers and the next of look, until the range is covered.
func scanLooks(lo, hi, from, first, look int) []int {
	var seen []int
	for done, n := 0, first; done < hi-lo; n = look {
		k := int(C.fdt_scan_len(C.int(lo), C.int(hi), C.int(from), C.int(done), C.int(n)))
		if k <= 0 {
			break
		}
		for i := 0; i < k; i++ {
			seen = append(seen, from+i)
		}
		done += k
		from = int(C.fdt_scan_next(C.int(lo), C.int(hi), C.int(from), C.int(k)))
	}
	return seen
}
