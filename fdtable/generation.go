package fdtable

/*
#include "fdtable.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// loadGeneration reads the table's change counter atomically.
func loadGeneration(h *RawHeader) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&h.generation)))
}
