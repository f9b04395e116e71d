package fdtable

import "testing"

// TestScanLooksOnce: a look for free fd numbers (fdwindow.c free_in) that
// starts anywhere in its range, with any first and later look lengths,
// looks at every number of the range exactly once. Before, a start off a
// look's boundary made the last look from the range's start reach the
// numbers the first one had counted: three free numbers at the top of a
// server's limit counted as six, its accept took the connection it had no
// numbers left to serve, and reset it (TestFdBudgetSoftEqualsHard under
// OSF_TEST_SHM_KFD=1, about one run in 75 under load).
func TestScanLooksOnce(t *testing.T) {
	for _, r := range []struct{ lo, hi int }{{0, 1024}, {0, 1}, {3, 40}, {1024, 4096}, {0, 33}} {
		for _, lk := range []struct{ first, look int }{{8, 32}, {32, 32}, {1, 1}, {8, 5}} {
			for from := r.lo; from < r.hi; from++ {
				seen := scanLooks(r.lo, r.hi, from, lk.first, lk.look)
				count := make(map[int]int, len(seen))
				for _, n := range seen {
					count[n]++
				}
				for n := r.lo; n < r.hi; n++ {
					if count[n] != 1 {
						t.Fatalf("range [%d, %d) from %d, looks of %d then %d: number %d looked at %d times",
							r.lo, r.hi, from, lk.first, lk.look, n, count[n])
					}
				}
				if len(seen) != r.hi-r.lo {
					t.Fatalf("range [%d, %d) from %d: %d looks at numbers", r.lo, r.hi, from, len(seen))
				}
			}
		}
	}
}
