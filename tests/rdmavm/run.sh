#!/bin/bash
# run.sh test|quick|bench [SECTIONS...] — make test-rdma, make test's reduced
# RDMA set, make bench-rdma: compile the Go test binaries on this host, boot
# the two guests (vm.sh) and run guest/test.sh or guest/bench.sh in them.
# Exit 0 when skipped (vm.sh's reason is printed), else the guests' status.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
what=${1:-test}
shift || true
cd "$root" || exit 2
case $what in
test | quick)
	script=$here/guest/test.sh
	[ "$what" = quick ] && set -- quick
	;;
bench) script=$here/guest/bench.sh ;;
*) echo "usage: $0 test|quick|bench [SECTIONS...]" >&2; exit 2 ;;
esac
if [ "$what" = test ]; then
	# the unit tests run in the guests as binaries built here (no Go there)
	mkdir -p build/rdmavm
	for p in ./verbs ./sdp/rdma ./tests; do
		go test -c -o "build/rdmavm/$(basename $p).test" "$p" || exit 1
	done
fi
out=$root/build/rdmavm/out-$what
rm -rf "$out"
mkdir -p "$out"
RDMAVM_OUT=$out "$here/vm.sh" "$script" "$@" 2>&1 | tee "$root/build/rdmavm/$what.log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 77 ]; then
	echo "rdmavm: skipped (see SKIP above)"
	exit 0
fi
echo "rdmavm: $what: exit status $rc; logs in $out"
exit "$rc"
