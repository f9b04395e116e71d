package verbs_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/osfproject/osf/internal/testutil"
	"github.com/osfproject/osf/verbs"
)

// recordTB records what SkipIfNoRDMA asks of it instead of skipping.
type recordTB struct {
	testing.TB
	skipped string
}

func (r *recordTB) Helper()          {}
func (r *recordTB) Skip(args ...any) { r.skipped = fmt.Sprint(args...) }
func (r *recordTB) SkipNow()         { r.skipped = "SkipNow" }
func (r *recordTB) Skipf(f string, args ...any) {
	r.skipped = fmt.Sprintf(f, args...)
}

// TestSkipIfNoRDMAReason checks the exact skip message on a machine whose
// kernel has no RDMA support (as the development machines).
func TestSkipIfNoRDMAReason(t *testing.T) {
	_, err := verbs.Devices()
	if err == nil {
		t.Skip("this machine has RDMA devices")
	}
	rec := &recordTB{TB: t}
	testutil.SkipIfNoRDMA(rec)
	if rec.skipped == "" {
		t.Fatal("SkipIfNoRDMA did not skip without devices")
	}
	t.Logf("skip reason: %s", rec.skipped)
	if _, statErr := os.Stat("/sys/class/infiniband"); errors.Is(statErr, os.ErrNotExist) && errors.Is(err, verbs.ErrNoKernelSupport) {
		want := "no RDMA device: ibv_get_device_list returned 0 devices (errno ENOSYS: kernel has no RDMA support)"
		if rec.skipped != want {
			t.Errorf("skip reason %q, want %q", rec.skipped, want)
		}
	}
}
