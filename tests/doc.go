// Package tests holds osf's integration tests: real programs (the C helpers
// in progs/, coreutils, bash, python3, nginx, curl) run bare and under
// LD_PRELOAD=libosf.so, with the same expectations, and with proof that
// the library (and, where it matters, the Go core) really was loaded.
//
// The test binary moves itself into a private network namespace
// (testutil.MainInNetns), so it needs root: as another user it fails,
// unless OSF_TEST_ALLOW_PARTIAL=1 lets it run in place and skip each test
// that needs root (testutil.NeedRoot). `make build` must have run.
//
//	make build && go test -count=1 ./tests/
//
// OSFTEST_BUILD_DIR=DIR runs the tests against the artifacts in DIR (a
// patched library, for one) instead of build/.
package tests
