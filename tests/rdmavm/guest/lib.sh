# Sourced by tests/rdmavm guest scripts (run in both guests, A and B).
#   barrier NAME [SECONDS]   wait until the other guest reaches NAME too
#   on A|B CMD...            run CMD only in that guest
#   osf TAG CMD...           run CMD under osf (log in osf-TAG-$GUEST.log)
#   pass/fail/skip MSG       record a result; finish prints the summary
#   expect_rdma TAG PROG [N] osfstat: PROG's sockets connected here (at
#                            least N, default 1) are all rdma, bytes moved
#   side_spec NAME=TREE[,VAR=V...]  a benchmark side: sets name, t (a build
#                            tree, kernel or rsocket) and vars (the VAR=V
#                            list, comma-separated, or empty)
OSF=$OSF_ROOT
BIN=$OSF/build/bin
TPROG=$OSF/build/tests
GUESTDIR=$OSF/tests/rdmavm/guest
ROUTES="offload both * 10.77.0.0/24"
# Under emulation a healthy guest is 5-20x slower than a host: give the
# handshake room (see README, RDMA).
export OSF_CONNECT_TIMEOUT_MS=${OSF_CONNECT_TIMEOUT_MS:-10000}
RESULTS=$OUT/results-$GUEST.txt
: >"$RESULTS"

# nap SECONDS: sleep without a process (read's timeout on a pipe nobody
# writes): the waits below poll, and a sleep process per poll costs an
# emulated guest CPU time the programs under test would otherwise have
rm -f "/tmp/.nap-$$" && mkfifo "/tmp/.nap-$$" && exec {napfd}<>"/tmp/.nap-$$" && rm -f "/tmp/.nap-$$"
nap() { read -r -t "$1" -u "$napfd" || :; }

# cpu: the guest's busy ticks (all CPUs, user+nice+system+irq+softirq)
cpu() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }

barrier() {
	local n=$1 t=${2:-300} i=0
	touch "$OUT/.bar-$n-$GUEST"
	while [ ! -e "$OUT/.bar-$n-$PEER" ]; do
		nap 0.2
		i=$((i + 1))
		if [ $i -gt $((t * 5)) ]; then
			fail "barrier $n: $PEER did not arrive within ${t}s"
			return 1
		fi
	done
}

on() { local g=$1; shift; [ "$GUEST" = "$g" ] && "$@"; return 0; }

# wait_listen PORT: until a TCP listener on PORT exists here (at most 120 s),
# then 2 s more: under osf, listen() returns once the RDMA listener is up
# too, a little after the kernel's shows
wait_listen() {
	local i
	for i in $(seq 600); do
		[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && { sleep 2; return 0; }
		nap 0.2
	done
	fail "nothing listens on port $1 after 120 s"
	return 1
}

# wait_cm_listen PORT: until an rdma_cm listener on PORT exists here (at
# most 120 s), as rsocket's are (they are not the kernel's: ss never shows
# them)
wait_cm_listen() {
	local i
	for i in $(seq 600); do
		rdma res show cm_id 2>/dev/null | grep -qE "state LISTEN .*src-addr [0-9.]+:$1 " && return 0
		nap 0.2
	done
	fail "no rdma_cm listener on port $1 after 120 s"
	return 1
}

# used_rdma TAG: the core's logs of TAG on this guest say every connection
# it made or accepted took RDMA (none fell back)
used_rdma() {
	local f=$OUT/osf-$1-$GUEST.log
	if grep -qE 'rdma via |rdma: accepted ' "$f" && ! grep -qE '(connect|accept) [^ ]*: kernel: ' "$f"; then
		return 0
	fi
	echo "  $1 on $GUEST did not use RDMA: $(grep -hE 'kernel: |rdma via |rdma: accepted' "$f" | head -3 | cut -c1-300)"
	return 1
}

osf() {
	local tag=$1
	shift
	env LD_PRELOAD="$OSF/build/libosf.so" "OSF_ROUTES=$ROUTES" OSF_LOG_LEVEL=debug \
		OSF_LOG_FILE="$OUT/osf-$tag-$GUEST.log" "$@"
}

# stop PID: end a server started with `osf TAG CMD... &` (PID is the
# subshell running the osf function; the program is its child) and reap it
stop() {
	pkill -TERM -P "$1" 2>/dev/null
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

side_spec() {
	name=${1%%=*}
	local spec=${1#*=}
	t=${spec%%,*}
	vars=
	[ "$spec" = "$t" ] || vars=${spec#*,}
}

pass() { echo "PASS [$GUEST] $*"; echo "PASS $*" >>"$RESULTS"; }
fail() { echo "FAIL [$GUEST] $*"; echo "FAIL $*" >>"$RESULTS"; }
skip() { echo "SKIP [$GUEST] $*"; echo "SKIP $*" >>"$RESULTS"; }
# check NAME CMD...: pass or fail by CMD's status
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n"; fi; }

# ostat_check TAG PROG TRANSPORT N [REASON]: ostat.py on osfstat's view,
# asked again (for up to 120 s) while PROG has fewer than N sockets
ostat_check() {
	local tag=$1 i rc
	for i in $(seq 40); do
		"$BIN/osfstat" --json >"$OUT/osfstat-$tag-$GUEST.json" 2>&1
		python3 "$GUESTDIR/ostat.py" "$OUT/osfstat-$tag-$GUEST.json" "${@:2}" >"$OUT/.ostat-$GUEST" 2>&1
		rc=$?
		[ $rc = 2 ] || break
		sleep 3
	done
	cat "$OUT/.ostat-$GUEST"
	return $rc
}

expect_rdma() {
	local tag=$1 prog=$2 n=${3:-1}
	if ostat_check "$tag" "$prog" rdma "$n"; then
		pass "$tag: osfstat on $GUEST: $prog's connections are rdma"
	else
		fail "$tag: osfstat on $GUEST: $prog's connections are not all rdma"
	fi
}

# expect_kernel TAG PROG REASON-SUBSTRING: PROG's connections are kernel TCP
# with that reason
expect_kernel() {
	local tag=$1 prog=$2 why=$3
	if ostat_check "$tag" "$prog" kernel 1 "$why"; then
		pass "$tag: osfstat on $GUEST: $prog fell back to kernel TCP: $why"
	else
		fail "$tag: osfstat on $GUEST: $prog is not kernel TCP with reason \"$why\""
	fi
}

finish() {
	local f
	f=$(grep -c '^FAIL' "$RESULTS")
	echo "[$GUEST] $(grep -c '^PASS' "$RESULTS") passed, $f failed, $(grep -c '^SKIP' "$RESULTS") skipped"
	grep '^FAIL' "$RESULTS" | sed "s/^/[$GUEST] /"
	[ "$f" = 0 ]
}
