package rdma

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQPError: a QP that could not be created for want of a resource is a
// resource fallback; one refused with EINVAL (a connection request whose
// client had already given up) is not ("server out of resources" was a
// false reason).
func TestQPError(t *testing.T) {
	for _, tc := range []struct {
		err      error
		resource bool
	}{
		{fmt.Errorf("verbs: create qp: %w", unix.ENOMEM), true},
		{fmt.Errorf("verbs: create qp: %w", unix.EAGAIN), true},
		{fmt.Errorf("verbs: create qp: %w", unix.EINVAL), false},
		{fmt.Errorf("verbs: create qp: %w", unix.ENODEV), false},
	} {
		if got := errors.Is(qpError(tc.err), ErrResource); got != tc.resource {
			t.Errorf("qpError(%v): ErrResource = %v, want %v", tc.err, got, tc.resource)
		}
	}
}
