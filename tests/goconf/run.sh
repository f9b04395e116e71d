#!/usr/bin/env bash
# Go's own net and net/http test suites as an outside oracle for Go programs
# under osf (OSF_GO=1): each suite is built with the installed Go
# (CGO_ENABLED=1: dynamically linked, which LD_PRELOAD reaches), run bare
# and under libosf.so in a private network namespace from its source
# folder (the tests read ../testdata), and every test that passes bare but
# not under osf is listed. Exit 1 when there is one that KNOWN does not
# name. Skipped: tests that need DNS, the host's resolver configuration
# or interfaces a private namespace does not have (SKIP).
#
#	tests/goconf/run.sh [PKG...]    (default: net net/http)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${OSFTEST_BUILD_DIR:-$ROOT/build}"
LIB="$BUILD/libosf.so"
OUT="$BUILD/goconf"
GOROOT="$(go env GOROOT)"
SKIP='Lookup|DNS|Resolver|CNAME|MX|NS|Hosts|Addrinfo|Interface|Multicast|Cgo|Nsswitch|Conf'
# TestMultiPathTCP: an offloaded MPTCP socket is one that fell back to
# TCP (docs/LIMITS.md, MPTCP). TestLinuxSendfile: strace finds no sendfile
# system call, as osf's sendfile to an offloaded socket reads the file
# into the ring.
KNOWN="TestMultiPathTCP|TestLinuxSendfile"

[[ -e "$LIB" ]] || { echo "goconf: $LIB is missing: run make build first" >&2; exit 1; }
if [[ -z "${OSFGOCONF_IN_NETNS:-}" ]]; then
	if ! unshare -n -- true 2>/dev/null; then
		if [[ "${OSF_TEST_ALLOW_PARTIAL:-}" == 1 ]]; then
			echo "goconf: skipped: no private network namespace (needs root)" >&2
			exit 0
		fi
		echo "goconf: cannot create a private network namespace (needs root)" >&2
		exit 1
	fi
	exec env OSFGOCONF_IN_NETNS=1 unshare -n -- sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi
(($#)) || set -- net net/http
mkdir -p "$OUT"
rc=0
for pkg in "$@"; do
	name="${pkg//\//_}"
	bin="$OUT/$name.test"
	CGO_ENABLED=1 go test -c -o "$bin" "$pkg"
	for side in bare osf; do
		pre=()
		[[ $side == osf ]] && pre=(env LD_PRELOAD="$LIB" OSF_GO=1)
		(cd "$GOROOT/src/$pkg" && timeout 900 "${pre[@]}" "$bin" -test.short -test.v \
			-test.skip "$SKIP" >"$OUT/$name.$side.log" 2>&1) || true
		grep -aE '^--- PASS' "$OUT/$name.$side.log" | awk '{ print $3 }' | sort -u >"$OUT/$name.$side.pass"
	done
	lost=
	# A test lost once runs again alone under osf (a timing test on a
	# busy host); lost twice, it counts.
	for t in $(comm -23 "$OUT/$name.bare.pass" "$OUT/$name.osf.pass" | grep -vxE "$KNOWN" || true); do
		if (cd "$GOROOT/src/$pkg" && timeout 300 env LD_PRELOAD="$LIB" OSF_GO=1 "$bin" -test.short \
			-test.run "^$t\$" >>"$OUT/$name.osf.log" 2>&1); then
			echo "$pkg: $t failed under osf once, passed alone"
		else
			lost+="$t"$'\n'
		fi
	done
	lost="${lost%$'\n'}"
	echo "$pkg: $(wc -l <"$OUT/$name.bare.pass") tests pass bare, $(wc -l <"$OUT/$name.osf.pass") under osf (logs: $OUT/$name.*.log)"
	if [[ -n "$lost" ]]; then
		echo "$pkg: pass bare, not under osf:"
		sed 's/^/  /' <<<"$lost"
		rc=1
	fi
done
exit $rc
