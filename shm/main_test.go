package shm

import (
	"testing"

	"github.com/osfproject/osf/internal/testutil"
)

// The tests bind ports and companion names: a private network namespace
// keeps them from anyone else's.
func TestMain(m *testing.M) { testutil.MainInNetns(m) }
