#!/usr/bin/env bash
# tests/bench/run.sh — osf's benchmark table, measured in one run on this
# machine (`make bench`). It prints a Markdown table that can be pasted
# into the README, then the raw numbers.
#
# Like the integration tests it runs in a private network namespace with
# only loopback up: it re-executes itself under `unshare -n` (root needed;
# otherwise it warns and runs in place).
#
# Adding a row is one call: `row WHAT BARE OSF DIFFERENCE TARGET`, from a
# bench_* function listed in main(). Raw numbers go through `raw`.
#
# Environment: OSFTEST_BUILD_DIR (default ROOT/build) selects the build;
# BENCH_RUNS (default 7) the runs per syscall-loop side, BENCH_START_RUNS
# (default 200) the hyperfine runs per start-up side (the short client
# rows: BENCH_SHORT_ROUNDS rounds, default 15, of an eighth each),
# BENCH_CORE_RUNS (default 15) the coreload runs, BENCH_MEM_CONNS (default
# 2000) and BENCH_MEM_KIB (default 1024) the idle-memory row's connections
# and the KiB each moves each way, BENCH_HTTP_ROUNDS (default 3) and
# BENCH_HTTP_SECS (default 2) the HTTP servers' rounds and seconds per run.
# BENCH_STATIC_ROUNDS (default 5) the static ping-pong rows' alternating rounds.
# BENCH_POOL=1 adds to the churn and idle-memory rows a third side,
# "segs": osf with OSF_SHM_POOL=0 (a segment per connection instead of
# the default slots of regions), alternating in the
# same rounds, with rows of its own. OSF_SHM_POOL=0 in run.sh's own
# environment runs every osf side with a segment per connection.
# BENCH_KFD=1 adds to the churn rows the side "kfd": osf with
# OSF_SHM_KFD=1 (the connection's fd its kernel TCP socket), and to each
# HTTP row a row of its own against bare rounds of its own, with servers
# of its own started after the others stopped (http_bench);
# BENCH_KFD_BASE=PATH another, "kfdbase": the same with the libosf.so at
# PATH (another build: before and after a change, in the same rounds).
# BENCH_EFD=1 adds to the churn rows the side "efd0": osf with
# OSF_SHM_EFD=0 (a writers' socket pair per connection instead of the
# region's eventfd, the default).
set -euo pipefail

if [[ -z "${OSFBENCH_IN_NETNS:-}" ]]; then
	# The gRPC rows build tests/goprogs/grpcpp, a module of its own whose
	# dependencies come from the module proxy: fetch them here, where the
	# network is, not in the namespace (a fresh machine has none cached).
	(cd "$(dirname "${BASH_SOURCE[0]}")/../goprogs/grpcpp" && PATH="$PATH:/usr/local/go/bin" go mod download) ||
		echo "WARNING: go mod download for tests/goprogs/grpcpp failed: the gRPC rows will fail" >&2
	if [[ "$(id -u)" == 0 ]] && unshare -n -- true 2>/dev/null; then
		exec env OSFBENCH_IN_NETNS=1 unshare -n -- \
			sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
	fi
	echo "WARNING: cannot create a private network namespace (need root and unshare);" >&2
	echo "WARNING: measuring in the current one." >&2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${OSFTEST_BUILD_DIR:-$ROOT/build}"
LIB="$BUILD/libosf.so"
OSFPERF="$BUILD/bin/osfperf"
COREPROG="$BUILD/tests/coreload"
IDLEMEM="$BUILD/tests/idlemem"
CHURN="$BUILD/tests/churn"
FORKCOST="$BUILD/tests/forkcost"
RUNS="${BENCH_RUNS:-7}"
START_RUNS="${BENCH_START_RUNS:-200}"
CORE_RUNS="${BENCH_CORE_RUNS:-15}"
PY=/usr/bin/python3
CPU=0 # pinned CPU for the loops

for f in "$LIB" "$OSFPERF" "$COREPROG" "$IDLEMEM" "$CHURN" "$FORKCOST"; do
	[[ -e "$f" ]] || { echo "bench: $f is missing: run \`make build\` first" >&2; exit 1; }
done
for tool in hyperfine taskset jq "$PY"; do
	command -v "$tool" >/dev/null || { echo "bench: $tool is not installed (make deps)" >&2; exit 1; }
done

TMP="$(mktemp -d)"
SRV_PID=
SRV_MORE=() # servers beyond SRV_PID, killed at exit too
GW_PIDS=()
GW_NS=()
trap 'kill $SRV_PID "${SRV_MORE[@]}" 2>/dev/null || true; gw_teardown; rm -rf "$TMP"' EXIT

ROWS=()
RAW=()

# row WHAT BARE OSF DIFFERENCE TARGET adds one line to the table.
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 |"); }

# raw LINE... records raw measurements, printed after the table.
raw() { RAW+=("$*"); }

# stats FN NUMBERS... prints min, median or max of the numbers.
stats() {
	local fn=$1
	shift
	printf '%s\n' "$@" | "$PY" -c "
import statistics, sys
v = [float(x) for x in sys.stdin.read().split()]
print({'min': min, 'max': max, 'median': statistics.median}['$fn'](v))"
}

# calc EXPR evaluates a Python expression and prints the result.
calc() { "$PY" -c "print($1)"; }

# --- (a) pass-through cost of a hooked call on an fd osf does not own ----
bench_syscall_loop() {
	local b=() o=() i
	for ((i = 0; i < RUNS; i++)); do # interleaved, so drift hits both sides
		b+=("$(taskset -c $CPU "$OSFPERF" syscall-loop -n 1000000 -f fcntl --json | jq .ns_per_call)")
		o+=("$(taskset -c $CPU env LD_PRELOAD="$LIB" "$OSFPERF" syscall-loop -n 1000000 -f fcntl --json | jq .ns_per_call)")
	done
	local bb ob
	bb=$(stats min "${b[@]}")
	ob=$(stats min "${o[@]}")
	row "\`fcntl(F_GETFL)\` loop, 1,000,000 calls, best of $RUNS, pinned (ns/call)" \
		"$bb" "$ob" "$(calc "'%+.1f %%' % (($ob - $bb) / $bb * 100)")" "≤ +5 %"
	raw "syscall-loop fcntl ns/call bare: ${b[*]}"
	raw "syscall-loop fcntl ns/call osf:  ${o[*]}"
}

# --- (b) start-up cost of a program that never opens a TCP socket --------
bench_startup() {
	# Both sides run through env(1), so that only libosf.so differs. The
	# runs are split into rounds that alternate the sides, so that a load
	# change on the machine during the benchmark hits both alike.
	local rounds=5 per r
	per=$(((START_RUNS + rounds - 1) / rounds))
	: >"$TMP/bare.times"
	: >"$TMP/osf.times"
	for ((r = 0; r < rounds; r++)); do
		taskset -c $CPU hyperfine -N --style none --warmup 10 --runs "$per" \
			--export-json "$TMP/true.json" \
			-n bare "/usr/bin/env LD_PRELOAD= /bin/true" \
			-n osf "/usr/bin/env LD_PRELOAD=$LIB /bin/true" >/dev/null
		jq '.results[0].times[] * 1000' "$TMP/true.json" >>"$TMP/bare.times"
		jq '.results[1].times[] * 1000' "$TMP/true.json" >>"$TMP/osf.times"
	done
	local bm om n
	n=$(wc -l <"$TMP/bare.times")
	bm=$(stats median $(cat "$TMP/bare.times"))
	om=$(stats median $(cat "$TMP/osf.times"))
	row "\`/bin/true\` start-up, median of $n, $rounds alternating rounds (ms)" \
		"$(calc "'%.3f' % $bm")" "$(calc "'%.3f' % $om")" \
		"$(calc "'%+.3f ms' % ($om - $bm)")" "≤ +0.2 ms"
	raw "/bin/true bare: median $bm ms, min $(stats min $(cat "$TMP/bare.times")) ms, $n runs (hyperfine -N, through env)"
	raw "/bin/true osf:  median $om ms, min $(stats min $(cat "$TMP/osf.times")) ms, $n runs"
}

# --- (c) loading the Go core: first connect() in a process and in a fork
# child (a fresh copy of the core from a memfd) -------------------------
bench_core_load() {
	local f=() s=() cf=() cs=() bf=() bs=() bcf=() bcs=() hung=0 i out
	local parse='s/first_ms=([0-9.]+) second_ms=([0-9.]+) child_first_ms=([0-9.]+) child_second_ms=([0-9.]+)/\1 \2 \3 \4/'
	for ((i = 0; i < CORE_RUNS; i++)); do
		out=$(timeout 10 "$COREPROG" 2>/dev/null)
		read -r bf[i] bs[i] bcf[i] bcs[i] < <(sed -E "$parse" <<<"$out")
		# Bounded: a hang (the core-serve race, see the test report)
		# must not stop the benchmark.
		if ! out=$(timeout 10 env LD_PRELOAD="$LIB" "$COREPROG" 2>/dev/null); then
			hung=$((hung + 1))
			continue
		fi
		read -r f[i] s[i] cf[i] cs[i] < <(sed -E "$parse" <<<"$out")
	done
	local n=${#f[@]} note=""
	((hung == 0)) || note=", $hung of $CORE_RUNS runs hung and were killed"
	raw "coreload bare first_ms: ${bf[*]}"
	raw "coreload bare second_ms: ${bs[*]}"
	raw "coreload bare child_first_ms: ${bcf[*]}"
	raw "coreload bare child_second_ms: ${bcs[*]}"
	if ((n == 0)); then
		row "first \`connect()\` in a process, loads the Go core (ms)" "$(stats median "${bf[@]}")" "every run hung" "—" "—"
		return
	fi
	raw "coreload osf first_ms: ${f[*]}"
	raw "coreload osf second_ms: ${s[*]}"
	raw "coreload osf child_first_ms: ${cf[*]}"
	raw "coreload osf child_second_ms: ${cs[*]}"
	((hung == 0)) || raw "coreload: $hung of $CORE_RUNS runs under osf hung (killed after 10 s)"
	# core_row WHAT BARE-VALUES OSF-VALUES TARGET: medians and difference.
	core_row() {
		local bm om
		bm=$(stats median $2)
		om=$(stats median $3)
		row "$1" "$(calc "'%.3f' % $bm")" "$(calc "'%.3f' % $om")" "$(calc "'%+.3f ms' % ($om - $bm)")" "$4"
	}
	core_row "first \`connect()\` in a process, to a listener without osf: C route decision and companion look-up, no Go core (ms, median of $n$note)" \
		"${bf[*]}" "${f[*]}" "≤ +0.5 ms"
	core_row "second \`connect()\` in that process (ms)" "${bs[*]}" "${s[*]}" ""
	core_row "first \`connect()\` in a fork child (ms)" \
		"${bcf[*]}" "${cf[*]}" "≤ +0.5 ms"
	core_row "second \`connect()\` in the fork child (ms)" "${bcs[*]}" "${cs[*]}" ""
}

# --- (d) the shm transport: real traffic, both sides bare (kernel TCP)
# and both under osf. The osf client runs with OSF_STRICT=1, so a
# connection that fell back to kernel TCP fails instead of being measured
# as an offloaded one. Server and client are pinned to different CPUs.
SRV_CPU=0
CLI_CPU=$(($(nproc) > 1 ? 1 : 0))
PORT=21000
SRV_PIN=(taskset -c $SRV_CPU) # empty: the server runs unpinned

# serve SIDE CMD... starts a server (bare or under osf) pinned to SRV_CPU,
# records its pid in SRV_PID and waits until it listens on PORT.
serve() {
	local side=$1
	shift
	if [[ "$side" == osf ]]; then
		"${SRV_PIN[@]}" env LD_PRELOAD="$LIB" "$@" >"$TMP/server.out" 2>&1 &
	elif [[ "$side" == segs ]]; then
		"${SRV_PIN[@]}" env LD_PRELOAD="$LIB" OSF_SHM_POOL=0 "$@" >"$TMP/server.out" 2>&1 &
	elif [[ "$side" == kfd ]]; then
		"${SRV_PIN[@]}" env LD_PRELOAD="$LIB" OSF_SHM_KFD=1 "$@" >"$TMP/server.out" 2>&1 &
	elif [[ "$side" == kfdbase ]]; then
		"${SRV_PIN[@]}" env LD_PRELOAD="$BENCH_KFD_BASE" OSF_SHM_KFD=1 "$@" >"$TMP/server.out" 2>&1 &
	elif [[ "$side" == efd0 ]]; then
		"${SRV_PIN[@]}" env LD_PRELOAD="$LIB" OSF_SHM_EFD=0 "$@" >"$TMP/server.out" 2>&1 &
	else
		"${SRV_PIN[@]}" "$@" >"$TMP/server.out" 2>&1 &
	fi
	SRV_PID=$!
	wait_listen $PORT "$TMP/server.out" "$*"
}

# wait_listen PORT LOG WHAT waits until something listens on PORT; after
# 10 s it prints LOG and fails. Listening, by ss: a probe connection would
# be the one connection that `-1` servers accept.
wait_listen() {
	local i
	for ((i = 0; i < 400; i++)); do # 400 × 25 ms: bounded
		[[ -n "$(ss -Hltn "sport = :$1")" ]] && return 0
		sleep 0.025
	done
	echo "bench: nothing listens on port $1: $3" >&2
	cat "$2" >&2
	return 1
}

# unserve stops the server started by serve.
unserve() {
	kill "$SRV_PID" 2>/dev/null || true
	wait "$SRV_PID" 2>/dev/null || true
	SRV_PID=
	PORT=$((PORT + 1))
}

# client SIDE CMD... runs a client pinned to CLI_CPU, bounded to 120 s.
client() {
	local side=$1
	shift
	if [[ "$side" == osf ]]; then
		taskset -c $CLI_CPU timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 "$@"
	else
		taskset -c $CLI_CPU timeout 120 "$@"
	fi
}

# ratio A B prints A/B as "N.Nx".
ratio() { calc "'%.1fx' % ($1 / $2)"; }

# bench_shm_pingpong: osfperf ping-pong, 64 B, blocking and default (spin).
bench_shm_pingpong() {
	local side mode json
	declare -A p50 p99
	for mode in blocking spin; do
		for side in bare osf; do
			serve "$side" "$OSFPERF" server -a 127.0.0.1 -p $PORT -1
			local extra=()
			[[ "$mode" == blocking ]] && extra=(--blocking)
			json=$(client "$side" "$OSFPERF" client -p $PORT -n 200000 "${extra[@]}" --json)
			unserve
			p50[$mode$side]=$(jq .p50 <<<"$json")
			p99[$mode$side]=$(jq .p99 <<<"$json")
			raw "osfperf pingpong 64 B $mode $side: $json"
		done
		row "ping-pong 64 B, $mode calls, p50 (µs)" "${p50[${mode}bare]}" "${p50[${mode}osf]}" \
			"$(ratio "${p50[${mode}bare]}" "${p50[${mode}osf]}") faster" "≥ 8x faster"
		row "ping-pong 64 B, $mode calls, p99 (µs)" "${p99[${mode}bare]}" "${p99[${mode}osf]}" \
			"$(ratio "${p99[${mode}bare]}" "${p99[${mode}osf]}") faster" ""
	done
}

# bench_busy_pingpong: the ping-pong on a deliberately busy host: a CPU
# hog per CPU (bounded by timeout, killed after), both ends unpinned, so
# that they compete with the hogs and each other as on a loaded server.
# Spinning must adapt there (preload/spin.c): osf at most the kernel's.
bench_busy_pingpong() {
	local side json hogs=() c
	declare -A p50 p99
	for ((c = 0; c < $(nproc); c++)); do
		taskset -c $c timeout 300 sh -c 'while :; do :; done' &
		hogs+=($!)
	done
	for side in bare osf; do
		SRV_PIN=()
		serve "$side" "$OSFPERF" server -a 127.0.0.1 -p $PORT -1
		SRV_PIN=(taskset -c $SRV_CPU)
		if [[ "$side" == osf ]]; then
			json=$(timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 "$OSFPERF" client -p $PORT -n 100000 --blocking --json)
		else
			json=$(timeout 120 "$OSFPERF" client -p $PORT -n 100000 --blocking --json)
		fi
		unserve
		p50[$side]=$(jq .p50 <<<"$json")
		p99[$side]=$(jq .p99 <<<"$json")
		raw "osfperf pingpong 64 B blocking, unpinned, a hog per CPU, $side: $json"
	done
	kill "${hogs[@]}" 2>/dev/null || true
	wait "${hogs[@]}" 2>/dev/null || true
	row "ping-pong 64 B, blocking, unpinned, a CPU hog per CPU, p50 (µs)" "${p50[bare]}" "${p50[osf]}" \
		"$(ratio "${p50[bare]}" "${p50[osf]}") faster" "≥ 1x (never slower)"
	row "ping-pong 64 B, blocking, unpinned, a CPU hog per CPU, p99 (µs)" "${p99[bare]}" "${p99[osf]}" \
		"$(ratio "${p99[bare]}" "${p99[osf]}") faster" ""
}

# bench_shm_stream: osfperf stream, 64 KiB writes: the transport's
# throughput (the receiver does not look at the bytes, as iperf3), then
# the same with every byte checksummed on both sides (the checksum, the
# same work bare and under osf, then bounds both).
bench_shm_stream() {
	local side json verify extra
	declare -A mbs
	for verify in no yes; do
		extra=()
		[[ $verify == yes ]] || extra=(--no-verify)
		for side in bare osf; do
			serve "$side" "$OSFPERF" server -a 127.0.0.1 -p $PORT -1
			json=$(client "$side" "$OSFPERF" client -p $PORT -t stream -b 4G -w 64K "${extra[@]}" --json)
			unserve
			mbs[$verify$side]=$(jq .MB_per_s <<<"$json")
			raw "osfperf stream 4 GiB $side (verify $verify): $json"
		done
	done
	row "stream 4 GiB, 64 KiB writes (MB/s)" "${mbs[nobare]}" "${mbs[noosf]}" \
		"$(ratio "${mbs[noosf]}" "${mbs[nobare]}")" "≥ 3x"
	row "stream 4 GiB, 64 KiB writes, every byte checksummed (MB/s)" "${mbs[yesbare]}" "${mbs[yesosf]}" \
		"$(ratio "${mbs[yesosf]}" "${mbs[yesbare]}")" ""
}

# bench_iperf3: iperf3 loopback, 5 s, one stream and four.
bench_iperf3() {
	local side json streams
	declare -A gbps
	for streams in 1 4; do
		for side in bare osf; do
			serve "$side" iperf3 -s -1 -p $PORT
			json=$(client "$side" iperf3 -c 127.0.0.1 -p $PORT -t 5 -P $streams -J)
			unserve
			gbps[$streams$side]=$(jq '.end.sum_received.bits_per_second / 1e9 * 100 | round / 100' <<<"$json")
			raw "iperf3 -P $streams $side: ${gbps[$streams$side]} Gbit/s"
		done
		row "iperf3 loopback, $streams stream(s), 5 s (Gbit/s)" "${gbps[${streams}bare]}" "${gbps[${streams}osf]}" \
			"$(ratio "${gbps[${streams}osf]}" "${gbps[${streams}bare]}")" ""
	done
}

# bench_asyncio: python asyncio streams, an echo server and a client
# sending 20 MB on one connection while it reads the echo back
# (tests/progs/asyncio_echo.py, every byte checked), unpinned.
# ASYNCIO_ROUNDS alternating rounds; the row gives the medians and the
# median of the rounds' ratios.
ASYNCIO_ROUNDS="${BENCH_ASYNCIO_ROUNDS:-5}"
bench_asyncio() {
	local SRV_PIN=() side i out pre b=() o=() r=() prog="$ROOT/tests/progs/asyncio_echo.py"
	for ((i = 0; i < ASYNCIO_ROUNDS; i++)); do
		for side in bare osf; do
			pre=()
			[[ $side == osf ]] && pre=(env LD_PRELOAD="$LIB" OSF_STRICT=1)
			serve "$side" "$PY" "$prog" server $PORT
			out=$(timeout 120 "${pre[@]}" "$PY" "$prog" client $PORT 20000000)
			unserve
			out=${out#MB/s }
			[[ -n "$out" ]] || { echo "bench: asyncio echo ($side) failed" >&2; return 1; }
			[[ $side == bare ]] && b+=("$out") || o+=("$out")
		done
		r+=("$(calc "${o[i]} / ${b[i]}")")
	done
	raw "python asyncio echo 20 MB, MB/s bare: ${b[*]}"
	raw "python asyncio echo 20 MB, MB/s osf:  ${o[*]}"
	row "python asyncio streams echo, 20 MB on one connection, unpinned (MB/s, median of $ASYNCIO_ROUNDS alternating rounds; ratio: median of the rounds' ratios)" \
		"$(calc "'%.1f' % $(stats median "${b[@]}")")" "$(calc "'%.1f' % $(stats median "${o[@]}")")" \
		"$(calc "'%.2fx' % $(stats median "${r[@]}")") (rounds $(calc "'%.2f' % $(stats min "${r[@]}")")–$(calc "'%.2fx' % $(stats max "${r[@]}")"))" "≥ 1x"
}

# bench_redis: redis-benchmark against redis-server, 50 clients.
bench_redis() {
	local side t csv
	declare -A rps
	for side in bare osf; do
		serve "$side" redis-server --port $PORT --bind 127.0.0.1 --save '' --appendonly no
		csv=$(client "$side" redis-benchmark -p $PORT -t get,set -n 200000 -q --csv)
		unserve
		for t in GET SET; do
			rps[$t$side]=$(awk -F'"' -v t="$t" '$2 == t { print $4 }' <<<"$csv")
		done
		raw "redis-benchmark $side: $(tr '\n' ' ' <<<"$csv")"
	done
	for t in GET SET; do
		row "redis-benchmark $t, 50 clients (req/s)" "${rps[${t}bare]}" "${rps[${t}osf]}" \
			"$(ratio "${rps[${t}osf]}" "${rps[${t}bare]}")" "≥ 2x"
	done
}

# --- (e) a connection's life: set-up rate, short client processes, memory
# that follows the traffic (issue 12). Both ends bare, or both under osf
# (the osf client with OSF_STRICT=1: a fallback fails instead of being
# measured as an offloaded connection).
CHURN_CONNS="${BENCH_CHURN_CONNS:-3000}"
CHURN_ROUNDS="${BENCH_CHURN_ROUNDS:-7}"

# bench_churn: connect, 64 B request, 64 B reply, close, CHURN_CONNS times
# from one client; CHURN_ROUNDS rounds, each a bare run then an osf run.
# The ratio is the median of the rounds' own ratios: a round's two runs are
# seconds apart, so load that comes and goes hits both. Server and client
# are pinned to different CPUs (bench_churn) or left to the scheduler as
# programs usually run (bench_churn_unpinned).
bench_churn() { churn_rows pinned; }
bench_churn_unpinned() { churn_rows unpinned; }

churn_rows() {
	local pin=$1 side r json
	declare -A cps
	local bare_v=() osf_v=() ratio_v=() pool_v=() pratio_v=() kfd_v=() kratio_v=() kb_v=() kbratio_v=()
	local efd_v=() eratio_v=()
	local cli=(taskset -c $CLI_CPU) what=""
	local sides=(bare osf)
	[[ "${BENCH_POOL:-0}" == 1 ]] && sides+=(segs)
	[[ "${BENCH_KFD:-0}" == 1 ]] && sides+=(kfd)
	[[ -n "${BENCH_KFD_BASE:-}" ]] && sides+=(kfdbase)
	[[ "${BENCH_EFD:-0}" == 1 ]] && sides+=(efd0)
	if [[ $pin == unpinned ]]; then
		SRV_PIN=()
		cli=()
		what=", unpinned"
	fi
	for ((r = 0; r < CHURN_ROUNDS; r++)); do
		for side in "${sides[@]}"; do
			serve "$side" "$CHURN" server $PORT "$CHURN_CONNS"
			if [[ $side == osf ]]; then
				json=$("${cli[@]}" timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 "$CHURN" loop $PORT "$CHURN_CONNS")
			elif [[ $side == segs ]]; then
				json=$("${cli[@]}" timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_POOL=0 "$CHURN" loop $PORT "$CHURN_CONNS")
			elif [[ $side == kfd ]]; then
				json=$("${cli[@]}" timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_KFD=1 "$CHURN" loop $PORT "$CHURN_CONNS")
			elif [[ $side == kfdbase ]]; then
				json=$("${cli[@]}" timeout 120 env LD_PRELOAD="$BENCH_KFD_BASE" OSF_STRICT=1 OSF_SHM_KFD=1 "$CHURN" loop $PORT "$CHURN_CONNS")
			elif [[ $side == efd0 ]]; then
				json=$("${cli[@]}" timeout 120 env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_EFD=0 "$CHURN" loop $PORT "$CHURN_CONNS")
			else
				json=$("${cli[@]}" timeout 120 "$CHURN" loop $PORT "$CHURN_CONNS")
			fi
			wait "$SRV_PID" 2>/dev/null || true
			SRV_PID=
			PORT=$((PORT + 1))
			cps[$side]=$(sed -E 's/.*conn_per_s=([0-9.]+).*/\1/' <<<"$json")
			case $side in
			bare) bare_v+=("${cps[$side]}") ;;
			osf) osf_v+=("${cps[$side]}") ;;
			segs) pool_v+=("${cps[$side]}") ;;
			kfd) kfd_v+=("${cps[$side]}") ;;
			kfdbase) kb_v+=("${cps[$side]}") ;;
			efd0) efd_v+=("${cps[$side]}") ;;
			esac
			raw "churn$what $side: $json"
		done
		ratio_v+=("$(calc "${cps[osf]} / ${cps[bare]}")")
		[[ -n "${cps[segs]:-}" ]] && pratio_v+=("$(calc "${cps[segs]} / ${cps[bare]}")")
		[[ -n "${cps[kfd]:-}" ]] && kratio_v+=("$(calc "${cps[kfd]} / ${cps[bare]}")")
		[[ -n "${cps[kfdbase]:-}" ]] && kbratio_v+=("$(calc "${cps[kfdbase]} / ${cps[bare]}")")
		[[ -n "${cps[efd0]:-}" ]] && eratio_v+=("$(calc "${cps[efd0]} / ${cps[bare]}")")
	done
	SRV_PIN=(taskset -c $SRV_CPU)
	local bm om rm target="≥ 1.5x"
	[[ $pin == unpinned ]] && target="≥ 1.0x"
	bm=$(stats median "${bare_v[@]}")
	om=$(stats median "${osf_v[@]}")
	rm=$(stats median "${ratio_v[@]}")
	raw "churn$what osf/bare per round: $(printf '%.2f ' "${ratio_v[@]}")"
	row "connection churn$what: connect, 64 B request, 64 B reply, close, $CHURN_CONNS times (conn/s, median of $CHURN_ROUNDS alternating rounds; ratio: median of the rounds' ratios)" \
		"$(calc "'%.0f' % $bm")" "$(calc "'%.0f' % $om")" "$(calc "'%.1fx' % $rm")" "$target"
	churn_side "$what" segs "OSF_SHM_POOL=0" "$bm" "$target" pool_v pratio_v
	churn_side "$what" kfd "OSF_SHM_KFD=1" "$bm" "$target" kfd_v kratio_v
	churn_side "$what" kfdbase "OSF_SHM_KFD=1, ${BENCH_KFD_BASE:-}" "$bm" "$target" kb_v kbratio_v
	churn_side "$what" efd0 "OSF_SHM_EFD=0" "$bm" "$target" efd_v eratio_v
}

# churn_side WHAT TAG SETTING BARE_MEDIAN TARGET VALUES RATIOS: the row of
# an extra osf side measured in the same churn rounds (VALUES and RATIOS
# name its arrays of conn/s and per-round ratios), when it ran.
churn_side() {
	local what=$1 tag=$2 setting=$3 bm=$4 target=$5 om rm
	local -n side_v=$6 side_r=$7
	((${#side_v[@]})) || return 0
	om=$(stats median "${side_v[@]}")
	rm=$(stats median "${side_r[@]}")
	raw "churn$what $tag/bare per round: $(printf '%.2f ' "${side_r[@]}")"
	row "connection churn$what, $setting (the same rounds)" \
		"$(calc "'%.0f' % $bm")" "$(calc "'%.0f' % $om")" "$(calc "'%.1fx' % $rm")" "$target"
}

# bench_short_client: a new process that makes one connection (churn
# once), and curl fetching a 64-byte reply: per-process cost. A start-up
# costs ~1-10 ms, which the load of a shared host moves by more than the
# targets within seconds, so a bare and an osf server run side by side and
# the clients alternate in SHORT_ROUNDS short rounds (the side that goes
# first alternates too), each a hyperfine run of START_RUNS/8 processes. A
# side's number is the median of its rounds' medians; the difference is
# the median of the rounds' own differences (osf against the bare run
# right next to it, so that the load's drift cancels out); the raw lines
# give every round's difference and each side's spread.
SHORT_ROUNDS="${BENCH_SHORT_ROUNDS:-15}"
ms3() { calc "'%.3f' % $1"; }
bench_short_client() {
	local side what r cmd pre sides
	declare -A med rounds diff port
	for side in bare osf; do
		serve "$side" "$CHURN" server $PORT
		SRV_MORE+=("$SRV_PID")
		SRV_PID=
		port[$side]=$PORT
		PORT=$((PORT + 1))
	done
	for ((r = 0; r < SHORT_ROUNDS; r++)); do
		sides="bare osf"
		((r % 2 == 0)) || sides="osf bare"
		for what in churn curl; do
			for side in $sides; do
				cmd="$CHURN once ${port[$side]}"
				[[ $what == curl ]] && cmd="/usr/bin/curl -s -o /dev/null http://127.0.0.1:${port[$side]}/"
				pre="/usr/bin/env LD_PRELOAD="
				[[ $side == osf ]] && pre="/usr/bin/env LD_PRELOAD=$LIB OSF_STRICT=1"
				taskset -c $CLI_CPU hyperfine -N --style none --warmup 3 \
					--runs "$((START_RUNS / 8))" --export-json "$TMP/short.json" \
					-n "$side" "$pre $cmd" >/dev/null
				rounds[$what$side]+=" $(jq '.results[0].median * 1000' "$TMP/short.json")"
			done
		done
	done
	kill "${SRV_MORE[@]}" 2>/dev/null || true
	wait "${SRV_MORE[@]}" 2>/dev/null || true
	SRV_MORE=()
	for what in churn curl; do
		for side in bare osf; do
			# shellcheck disable=SC2086 # a list of numbers
			med[$what$side]=$(stats median ${rounds[$what$side]})
			# shellcheck disable=SC2086
			raw "short client $what $side: $(ms3 "${med[$what$side]}") ms, median of" \
				"$SHORT_ROUNDS rounds (min-max $(ms3 "$(stats min ${rounds[$what$side]})")-$(ms3 \
				"$(stats max ${rounds[$what$side]})")):$(for r in ${rounds[$what$side]}; do
					printf ' %s' "$(ms3 "$r")"; done)"
		done
		# shellcheck disable=SC2206 # lists of numbers
		local b=(${rounds[${what}bare]}) o=(${rounds[${what}osf]}) d="" v=""
		for ((r = 0; r < SHORT_ROUNDS; r++)); do
			if [[ $what == churn ]]; then
				v+=" $(calc "${o[r]} - ${b[r]}")"
				d+=" $(calc "'%+.3f ms' % (${o[r]} - ${b[r]})")"
			else
				v+=" $(calc "(${o[r]} - ${b[r]}) / ${b[r]} * 100")"
				d+=" $(calc "'%+.1f %%' % ((${o[r]} - ${b[r]}) / ${b[r]} * 100)")"
			fi
		done
		# shellcheck disable=SC2086
		diff[$what]=$(stats median $v)
		raw "short client $what, osf - bare in each round:$d"
	done
	row "short client process: start, one connection (64 B each way), exit (ms, median of $SHORT_ROUNDS rounds; difference: median of the rounds' differences)" \
		"$(ms3 "${med[churnbare]}")" "$(ms3 "${med[churnosf]}")" \
		"$(calc "'%+.3f ms' % ${diff[churn]}")" "≤ +0.5 ms"
	row "\`curl\` of a 64-byte reply, one process per fetch (ms, median of $SHORT_ROUNDS rounds; difference: median of the rounds' differences)" \
		"$(ms3 "${med[curlbare]}")" "$(ms3 "${med[curlosf]}")" \
		"$(calc "'%+.1f %%' % ${diff[curl]}")" "≤ +10 %"
}

# bench_fork: fork, _exit(0) in the child, waitpid, 2000 times, in a
# process holding FORK_CONNS connections over loopback (both ends, made
# before the loop; tests/progs/forkcost.c), and in one that never opened a
# socket. Pinned to one CPU, so that parent and child take turns and the
# time is the work of both; 5 alternating runs a side, median.
FORK_CONNS="${BENCH_FORK_CONNS:-4}"
bench_fork() {
	local n r side v
	for n in 0 "$FORK_CONNS"; do
		local b=() o=()
		for ((r = 0; r < 5; r++)); do
			for side in bare osf; do
				local pre="env LD_PRELOAD="
				[[ $side == osf ]] && pre="env LD_PRELOAD=$LIB OSF_STRICT=1"
				v=$(timeout 120 taskset -c $CPU $pre "$FORKCOST" "$n" 2000 | sed -E 's/us_per_fork=//')
				if [[ $side == bare ]]; then b+=("$v"); else o+=("$v"); fi
			done
		done
		raw "fork + exit + wait, $n connections, us per fork bare: ${b[*]}"
		raw "fork + exit + wait, $n connections, us per fork osf:  ${o[*]}"
		local bm om what target="≤ +25 %"
		bm=$(stats median "${b[@]}")
		om=$(stats median "${o[@]}")
		what="a process holding $n offloaded connections"
		if ((n == 0)); then
			what="a process that never opened a socket"
			target="≤ +5 %"
		fi
		row "\`fork\` + exit + wait of $what, pinned (µs per fork, median of 5)" \
			"$(calc "'%.0f' % $bm")" "$(calc "'%.0f' % $om")" \
			"$(calc "'%+.0f %%' % (($om - $bm) / $bm * 100)")" "$target"
	done
}

# mem_held PID... prints the memory two processes hold, in bytes: their
# RSS (anonymous and file pages), plus the shared memory of osf's segments
# (each memfd counted once), plus their TCP sockets' buffers (skmem r + w
# + f of every TCP socket in this network namespace, by ss). Page tables
# and the socket structures themselves are not counted (neither side's).
mem_held() {
	ss -Htmn 2>/dev/null | grep -o 'skmem:([^)]*)' >"$TMP/skmem" || true
	"$PY" - "$TMP/skmem" "$@" <<'PYEOF'
import os, re, sys
skmem, pids = open(sys.argv[1]).read(), sys.argv[2:]
rss, segs, pte, maps = 0, {}, 0, 0
for pid in pids:
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(":", 1)
        if k in ("RssAnon", "RssFile"):
            rss += int(v.split()[0]) * 1024
        if k == "VmPTE":
            pte += int(v.split()[0]) * 1024
    maps += sum(1 for _ in open(f"/proc/{pid}/maps"))
    d = f"/proc/{pid}/fd"
    for fd in os.listdir(d):
        try:
            l = os.readlink(f"{d}/{fd}")
            if "memfd:osf-seg" in l or "memfd:osf-region" in l:
                st = os.stat(f"{d}/{fd}")
                segs[st.st_ino] = st.st_blocks * 512
        except OSError:
            pass
sock = sum(int(n) for k, n in re.findall(r"\b([rwf])(\d+)", skmem))
print(rss + sum(segs.values()) + sock, rss, sum(segs.values()), sock, len(segs), pte, maps)
PYEOF
}

# bench_idle_memory: N connections (BENCH_MEM_CONNS) between two
# processes each move M KiB (BENCH_MEM_KIB) each way in 64 KiB messages,
# every other one leaves 10000 echoed bytes unread, then both sides sleep
# in epoll_wait: the memory both processes hold once idle (mem_held).
# Afterwards the traffic resumes and every byte is checked.
bench_idle_memory() {
	idle_memory_case "${BENCH_MEM_CONNS:-2000}" -1 10000 "idle connections"
	# Both ends asleep in a blocking recv, a thread per connection, never
	# polling: preload/reaper.c gives their pages back.
	idle_memory_case "${BENCH_MEM_BLOCK_CONNS:-500}" -2 -1 "idle connections, each end a thread asleep in a blocking recv,"
	# The client waits on none of its connections: asleep in nanosleep,
	# or in poll() on stdin alone; the reaper trims them all the same.
	idle_memory_case "${BENCH_MEM_CONNS:-2000}" -1 10000 "idle connections, the client asleep in nanosleep," sleep
	idle_memory_case "${BENCH_MEM_CONNS:-2000}" -1 10000 "idle connections, the client in poll() on stdin alone," poll
}

# idle_memory_case N SERVER_MS UNREAD LABEL [IDLE]: one memory row
# (idlemem's server wait mode, the client's unread bytes and how it idles,
# see tests/progs/idlemem.c).
idle_memory_case() {
	local n=$1 ms=$2 unread=$3 what=$4 idle=${5:-epoll} kib=${BENCH_MEM_KIB:-1024} side line i m
	declare -A held
	local sides=(bare osf)
	[[ "${BENCH_POOL:-0}" == 1 ]] && sides+=(segs)
	for side in "${sides[@]}"; do
		serve "$side" "$IDLEMEM" server $PORT "$n" "$ms"
		if [[ "$side" == osf ]]; then
			coproc IDLE { exec taskset -c $CLI_CPU env LD_PRELOAD="$LIB" OSF_STRICT=1 \
				"$IDLEMEM" client $PORT "$n" "$kib" "$unread" $idle; }
		elif [[ "$side" == segs ]]; then
			coproc IDLE { exec taskset -c $CLI_CPU env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_POOL=0 \
				"$IDLEMEM" client $PORT "$n" "$kib" "$unread" $idle; }
		else
			coproc IDLE { exec taskset -c $CLI_CPU "$IDLEMEM" client $PORT "$n" "$kib" "$unread" $idle; }
		fi
		line=
		read -r -t 300 line <&"${IDLE[0]}" || true
		if [[ "$line" != "idle $n" ]]; then
			echo "bench: idlemem client: $line" >&2
			kill "$IDLE_PID" 2>/dev/null || true
			unserve
			return 1
		fi
		for ((i = 0; i < 50; i++)); do # until it stops falling: 50 × 0.2 s
			m=$(mem_held "$SRV_PID" "$IDLE_PID")
			[[ -n "${held[$side]:-}" && "${m%% *}" -ge "${held[$side]%% *}" ]] && break
			held[$side]=$m
			sleep 0.2
		done
		echo go >&"${IDLE[1]}"
		read -r -t 300 line <&"${IDLE[0]}" || true
		[[ "$line" == ok ]] || echo "bench: idlemem client after idling: $line" >&2
		wait "$IDLE_PID" 2>/dev/null || true
		unserve
		raw "idle memory $side, $n $what $kib KiB each way: total rss segments sockets nsegments pagetables mappings = ${held[$side]}"
	done
	local b=${held[bare]%% *} o=${held[osf]%% *}
	row "memory held by $n $what that moved $kib KiB each way (MB, RSS + shared memory + socket buffers)" \
		"$(calc "round($b / 1e6, 1)")" "$(calc "round($o / 1e6, 1)")" "$(ratio "$o" "$b")" "≤ 2x"
	if [[ -n "${held[segs]:-}" ]]; then
		o=${held[segs]%% *}
		row "memory held by $n ${what%,}, OSF_SHM_POOL=0 (the same run)" \
			"$(calc "round($b / 1e6, 1)")" "$(calc "round($o / 1e6, 1)")" "$(ratio "$o" "$b")" "≤ 2x"
	fi
}

# --- (g) real HTTP servers, as they are usually run (unpinned), with
# short connections (a connection per request: set-up and teardown
# dominate) and, for nginx, kept-alive ones (issue 28). A bare and an osf
# server run side by side; HTTP_ROUNDS rounds alternate the clients (the
# side that goes first alternates too), each run HTTP_SECS long. Every
# osf client and relay runs with OSF_STRICT=1, so a connection that would
# fall back to kernel TCP fails and is counted as an error: a row whose
# runs had any socket error, failed request or non-2xx answer says so
# instead of a rate. A side's number is the median of its runs; the ratio
# is the median of the rounds' own ratios.
HTTP_ROUNDS="${BENCH_HTTP_ROUNDS:-3}"
HTTP_SECS="${BENCH_HTTP_SECS:-2}"
HTTP_DIR=

# http_bg SIDE PORT CMD... starts a server or relay (bare, or under osf
# with OSF_STRICT=1) unpinned, adds it to SRV_MORE and waits until
# something listens on PORT.
http_bg() {
	local side=$1 port=$2
	shift 2
	if [[ $side == osf ]]; then
		env LD_PRELOAD="$LIB" OSF_STRICT=1 "$@" >>"$HTTP_DIR/servers.out" 2>&1 &
	elif [[ $side == kfd ]]; then
		env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_KFD=1 "$@" >>"$HTTP_DIR/servers.out" 2>&1 &
	else
		"$@" >>"$HTTP_DIR/servers.out" 2>&1 &
	fi
	SRV_MORE+=($!)
	wait_listen "$port" "$HTTP_DIR/servers.out" "$*"
}

# http_stop stops the servers http_bg started.
http_stop() {
	kill "${SRV_MORE[@]}" 2>/dev/null || true
	wait "${SRV_MORE[@]}" 2>/dev/null || true
	SRV_MORE=()
}

# http_setup makes HTTP_DIR (readable by the servers' unprivileged
# workers) with www/small.html, 1 KiB.
http_setup() {
	local tool
	[[ -n "$HTTP_DIR" ]] && return 0
	for tool in nginx wrk ab apache2 haproxy node; do
		command -v "$tool" >/dev/null || { echo "bench: $tool is not installed (make deps)" >&2; exit 1; }
	done
	HTTP_DIR="$TMP/http"
	chmod 711 "$TMP"
	mkdir -p "$HTTP_DIR/www"
	"$PY" -c "print('x' * 1023)" >"$HTTP_DIR/www/small.html"
	chmod -R a+rX "$HTTP_DIR"
}

# nginx_start SIDE PORT: nginx, a master and two workers, serving HTTP_DIR/www.
nginx_start() {
	local conf="$HTTP_DIR/nginx-$2.conf"
	cat >"$conf" <<NGINX
daemon off;
master_process on;
worker_processes 2;
pid $HTTP_DIR/nginx-$2.pid;
error_log $HTTP_DIR/nginx-$2.err;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $HTTP_DIR/body-$2;
    proxy_temp_path $HTTP_DIR/proxy-$2;
    fastcgi_temp_path $HTTP_DIR/fastcgi-$2;
    uwsgi_temp_path $HTTP_DIR/uwsgi-$2;
    scgi_temp_path $HTTP_DIR/scgi-$2;
    server {
        listen 127.0.0.1:$2;
        root $HTTP_DIR/www;
    }
}
NGINX
	http_bg "$1" "$2" nginx -c "$conf" -e "$HTTP_DIR/nginx-$2.err"
}

# apache_start SIDE PORT: apache2 with the event MPM (two children of
# eight threads, as tests/servers_test.go runs it), serving HTTP_DIR/www.
apache_start() {
	local dir="$HTTP_DIR/apache-$2"
	mkdir -p "$dir"
	cat >"$dir/httpd.conf" <<APACHE
ServerRoot $dir
ServerName localhost
Listen 127.0.0.1:$2
PidFile $dir/httpd.pid
ErrorLog $dir/error.log
LogLevel warn
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
User nobody
Group nogroup
DocumentRoot $HTTP_DIR/www
StartServers 2
ServerLimit 4
ThreadsPerChild 8
MaxRequestWorkers 32
<Directory $HTTP_DIR/www>
  Require all granted
</Directory>
APACHE
	http_bg "$1" "$2" apache2 -D FOREGROUND -f "$dir/httpd.conf"
}

# haproxy_start SIDE PORT NGINX_PORT: haproxy (two threads) relaying to
# nginx on NGINX_PORT, reusing its connections to nginx across clients.
haproxy_start() {
	sed -e "s/FRONT_PORT/$2/" -e "s/NGINX_PORT/$3/" "$ROOT/tests/conf/haproxy.cfg" >"$HTTP_DIR/haproxy-$2.cfg"
	http_bg "$1" "$2" haproxy -db -f "$HTTP_DIR/haproxy-$2.cfg"
}

# node_start SIDE PORT: a node http server answering "hello".
node_start() {
	http_bg "$1" "$2" node -e \
		"require('http').createServer((q, s) => s.end('hello\\n')).listen(+process.argv[1], '127.0.0.1')" "$2"
}

# http_load SIDE TOOL URL: one run of the load generator (wrk, wrk-close
# for wrk with "Connection: close", or ab, without keep-alive), unpinned;
# prints the requests per second, or "errors" when any request failed.
http_load() {
	local side=$1 tool=$2 url=$3 pre=(timeout 60) out rps
	[[ $side == osf ]] && pre+=(env LD_PRELOAD="$LIB" OSF_STRICT=1)
	[[ $side == kfd ]] && pre+=(env LD_PRELOAD="$LIB" OSF_STRICT=1 OSF_SHM_KFD=1)
	case $tool in
	wrk) out=$("${pre[@]}" wrk -t2 -c16 -d"${HTTP_SECS}s" "$url" 2>&1) || true ;;
	wrk-close) out=$("${pre[@]}" wrk -t2 -c16 -d"${HTTP_SECS}s" -H 'Connection: close' "$url" 2>&1) || true ;;
	ab) out=$("${pre[@]}" ab -q -t "$HTTP_SECS" -c 8 "$url" 2>&1) || true ;;
	esac
	if [[ $tool == ab ]]; then
		rps=$(awk '/^Requests per second:/ { print $4 }' <<<"$out")
		grep -qE '^Failed requests: +0$' <<<"$out" || rps=
		grep -q '^Non-2xx responses' <<<"$out" && rps=
	else
		rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
		grep -qE 'Socket errors|Non-2xx' <<<"$out" && rps=
	fi
	if [[ -z "$rps" ]]; then
		echo "bench: $tool $url ($side) failed:" >&2
		echo "$out" >&2
		echo errors
		return
	fi
	echo "$rps"
}

# http_rows WHAT TOOL BARE_URL OSF_URL: HTTP_ROUNDS alternating rounds
# against the running servers, one row; OSF_URL is the server of the side
# HTTP_OSF_SIDE names (osf, or kfd: http_bench).
http_rows() {
	local what=$1 tool=$2 r side sides v failed="" o=${HTTP_OSF_SIDE:-osf}
	declare -A url=([bare]=$3 [$o]=$4) got
	local bare_v=() osf_v=() ratio_v=()
	for ((r = 0; r < HTTP_ROUNDS; r++)); do
		sides="bare $o"
		((r % 2 == 0)) || sides="$o bare"
		for side in $sides; do
			v=$(http_load "$side" "$tool" "${url[$side]}")
			got[$side]=$v
			[[ $v == errors ]] && failed+=" $side"
		done
		raw "$what, round $r: bare ${got[bare]}, $o ${got[$o]} req/s"
		[[ ${got[bare]} == errors || ${got[$o]} == errors ]] && continue
		bare_v+=("${got[bare]}")
		osf_v+=("${got[$o]}")
		ratio_v+=("$(calc "${got[$o]} / ${got[bare]}")")
	done
	if [[ -n "$failed" ]]; then
		row "$what (req/s)" "errors in a run:$failed" "see the raw numbers" "—" "≥ 1x"
		return
	fi
	row "$what (req/s, median of $HTTP_ROUNDS alternating ${HTTP_SECS} s runs; ratio: median of the rounds' ratios)" \
		"$(calc "'%.0f' % $(stats median "${bare_v[@]}")")" "$(calc "'%.0f' % $(stats median "${osf_v[@]}")")" \
		"$(calc "'%.2fx' % $(stats median "${ratio_v[@]}")")" "≥ 1x"
}

# http_bench START PATH [WHAT TOOL]...: a bare and an osf server (START
# SIDE PORT), then a row for each WHAT, TOOL pair against PATH on them.
# With BENCH_KFD=1 then a bare and a kfd server, and a row for each pair
# again: the switch's servers run only after the others stopped, since
# their stores keep unix sockets in flight (SCM_RIGHTS), while which
# every close of a unix socket on the host queues the kernel's unix
# garbage collector's work, the osf side's wake sockets' too (nginx
# close under osf measured at half its rate after a kfd run, in another
# network namespace even).
http_bench() {
	local start=$1 path=$2 b=$PORT o=$((PORT + 1)) args=("${@:3}") k label=""
	shift 2
	PORT=$((PORT + 2))
	http_setup
	for k in osf kfd; do
		[[ $k == kfd && "${BENCH_KFD:-0}" != 1 ]] && break
		if [[ $k == kfd ]]; then
			b=$PORT o=$((PORT + 1)) label=", OSF_SHM_KFD=1"
			PORT=$((PORT + 2))
		fi
		"$start" bare $b
		"$start" $k $o
		set -- "${args[@]}"
		while (($# >= 2)); do
			HTTP_OSF_SIDE=$k http_rows "$1$label" "$2" \
				"http://127.0.0.1:$b$path" "http://127.0.0.1:$o$path"
			shift 2
		done
		http_stop
	done
}

# haproxy_nginx_start SIDE PORT: haproxy on PORT relaying to an nginx of
# the same side on a port of its own.
haproxy_nginx_start() {
	local n=$PORT
	PORT=$((PORT + 1))
	nginx_start "$1" $n
	haproxy_start "$1" "$2" $n
}

bench_http_nginx() {
	http_bench nginx_start /small.html \
		"nginx (master and 2 workers), 1 KiB file, wrk -t2 -c16 with \`Connection: close\` (a connection per request), unpinned" wrk-close \
		"nginx (master and 2 workers), 1 KiB file, wrk -t2 -c16 keep-alive, unpinned" wrk
}

# bench_go: Go programs (tests/goprogs/gonet, dynamically linked, built
# here when missing) with OSF_GO=1 on the osf side: a 64 B ping-pong over
# the net package (gonet serve and gonet pingpong, pinned as the osfperf
# ping-pong is), then gonet's net/http server under wrk, keep-alive and a
# connection per request. OSF_STRICT=1 on the osf clients: a Go connection
# that fell back to kernel TCP fails the row instead of measuring the kernel.
GONET="$BUILD/tests/gonet"
bench_go() {
	local side out
	declare -A avg
	if [[ ! -x "$GONET" ]]; then
		(cd "$ROOT/tests" && CGO_ENABLED=1 go build -o "$GONET" ./goprogs/gonet)
	fi
	export OSF_GO=1
	for side in bare osf; do
		serve "$side" "$GONET" serve 127.0.0.1:$PORT
		out=$(client "$side" "$GONET" pingpong 127.0.0.1:$PORT 100000)
		unserve
		avg[$side]=$(sed -n 's/^rtt avg=\([0-9]*\) .*/\1/p' <<<"$out")
		[[ -n "${avg[$side]}" ]] || { echo "bench: gonet pingpong ($side): $out" >&2; return 1; }
		raw "gonet pingpong 64 B $side: $out"
	done
	row "Go ping-pong 64 B, net package, OSF_GO=1, pinned (µs per round trip, mean of 100,000)" \
		"$(calc "'%.1f' % (${avg[bare]} / 1000)")" "$(calc "'%.1f' % (${avg[osf]} / 1000)")" \
		"$(ratio "${avg[bare]}" "${avg[osf]}") faster" "≥ 5x faster"
	http_bench gonet_start /hello \
		"Go net/http server, OSF_GO=1, wrk -t2 -c16 keep-alive, unpinned" wrk \
		"Go net/http server, OSF_GO=1, wrk -t2 -c16 with \`Connection: close\`, unpinned" wrk-close
	grpcpp_build 1 "$GRPCPP"
	static_rows gRPC-dyn pinned osfgo
}

# bench_static: statically linked programs under `osfrun --static`
# (through osfload, docs/STATIC.md; OSF_STRICT=1 on the client, so a
# connection that fell back to kernel TCP fails the row) against the same
# programs on kernel TCP: the C echo's 64 B ping-pong
# (tests/progs/static/echo.c, gcc -static), pinned and unpinned, and
# gonet's (CGO_ENABLED=0), pinned, and a gRPC-Go unary call of 64 bytes
# (tests/goprogs/grpcpp, CGO_ENABLED=0), pinned. STATIC_ROUNDS alternating
# rounds of 20,000 round trips each; a row gives the medians and the
# ratio's spread.
STATIC_ECHO="$BUILD/tests/staticecho"
GONET_STATIC="$BUILD/tests/gonet-static"
GRPCPP="$BUILD/tests/grpcpp"
GRPCPP_STATIC="$BUILD/tests/grpcpp-static"
STATIC_ROUNDS="${BENCH_STATIC_ROUNDS:-5}"
bench_static() {
	[[ -x "$STATIC_ECHO" ]] || gcc -O2 -static -o "$STATIC_ECHO" "$ROOT/tests/progs/static/echo.c"
	[[ -x "$GONET_STATIC" ]] || (cd "$ROOT/tests" && CGO_ENABLED=0 go build -o "$GONET_STATIC" ./goprogs/gonet)
	grpcpp_build 0 "$GRPCPP_STATIC"
	static_rows C pinned
	static_rows C unpinned
	static_rows Go pinned
	static_rows gRPC pinned
}

# grpcpp_build CGO_ENABLED OUT builds tests/goprogs/grpcpp (a module of its
# own: gRPC is no dependency of osf's) unless OUT is there.
grpcpp_build() {
	[[ -x "$2" ]] || (cd "$ROOT/tests/goprogs/grpcpp" && CGO_ENABLED=$1 go build -o "$2" .)
}

# static_rows C|Go|gRPC|gRPC-dyn pinned|unpinned [static|osfgo]: one row of
# ping-pong rounds, the program bare against it under `osfrun --static`
# (static, the default) or under libosf.so with OSF_GO=1 (osfgo: the
# dynamically linked gRPC-dyn).
static_rows() {
	local kind=$1 pin=$2 osf=${3:-static} r side out k=() s=() ratios=()
	local what="$kind ping-pong 64 B" how="osfrun --static" target="≥ 5x faster"
	[[ $osf == static ]] && what="static $what"
	[[ $osf == osfgo ]] && how="OSF_GO=1"
	[[ $kind == gRPC* ]] && what="${what/$kind ping-pong/gRPC-Go unary call,} each way" target="≥ 2x faster"
	local kc=() sc=() rt cpu
	for ((r = 0; r < STATIC_ROUNDS; r++)); do
		for side in bare "$osf"; do
			out=$(static_pingpong "$kind" "$pin" "$side")
			[[ -n "$out" ]] || { echo "bench: $what ($side) failed" >&2; return 1; }
			read -r rt cpu <<<"$out"
			if [[ $side == bare ]]; then k+=("$rt") kc+=("$cpu"); else s+=("$rt") sc+=("$cpu"); fi
		done
		ratios+=("$(calc "${k[-1]} / ${s[-1]}")")
	done
	raw "$what $pin, ns per round trip, kernel TCP: ${k[*]}"
	raw "$what $pin, ns per round trip, $how: ${s[*]}"
	local km sm
	km=$(stats median "${k[@]}")
	sm=$(stats median "${s[@]}")
	row "$what, $how, $pin (µs per round trip, median of $STATIC_ROUNDS rounds of 20,000)" \
		"$(calc "'%.1f' % ($km / 1000)")" "$(calc "'%.1f' % ($sm / 1000)")" \
		"$(ratio "$km" "$sm") faster (rounds $(calc "'%.1f' % $(stats min "${ratios[@]}")")–$(calc "'%.1f' % $(stats max "${ratios[@]}")")x)" "$target"
	[[ $kind == gRPC* ]] || return 0
	# What the speed costs in CPU: osf's waits spin before they sleep
	# (OSF_SPIN_US, OSF_POLL_SPIN_US, the poll spin's growth).
	raw "$what $pin, CPU ns per round trip (both processes), kernel TCP: ${kc[*]}"
	raw "$what $pin, CPU ns per round trip (both processes), $how: ${sc[*]}"
	km=$(stats median "${kc[@]}")
	sm=$(stats median "${sc[@]}")
	row "$what, $how, $pin: CPU time of client and server (µs per round trip, median of $STATIC_ROUNDS rounds)" \
		"$(calc "'%.1f' % ($km / 1000)")" "$(calc "'%.1f' % ($sm / 1000)")" \
		"$(calc "'%.2fx' % ($sm / $km)")" "≤ 1x"
}

# static_pingpong C|Go|gRPC|gRPC-dyn pinned|unpinned bare|static|osfgo: one round's mean
# round trip in ns (empty on failure).
static_pingpong() {
	local kind=$1 pin=$2 side=$3 i port= srv=() cli=() pre=() out=
	[[ $pin == pinned ]] && srv=(taskset -c $SRV_CPU) cli=(taskset -c $CLI_CPU)
	local prog=$GONET_STATIC
	[[ $kind == gRPC ]] && prog=$GRPCPP_STATIC
	[[ $kind == gRPC-dyn ]] && prog=$GRPCPP
	[[ $side == static ]] && pre=(env LD_PRELOAD="$LIB" OSF_STRICT=1 "$BUILD/osfload")
	[[ $side == osfgo ]] && pre=(env LD_PRELOAD="$LIB" OSF_GO=1 OSF_STRICT=1)
	# emptied here: the server's own redirection may come after the
	# first look below, which would read the last round's port
	: >"$TMP/server.out"
	if [[ $kind == C ]]; then
		"${srv[@]}" "${pre[@]}" "$STATIC_ECHO" serve 127.0.0.1 >"$TMP/server.out" 2>&1 &
	else
		"${srv[@]}" "${pre[@]}" "$prog" serve 127.0.0.1:0 >"$TMP/server.out" 2>&1 &
	fi
	SRV_PID=$!
	for ((i = 0; i < 200; i++)); do
		port=$(sed -n 's/^listening \([0-9]*\)$/\1/p' "$TMP/server.out")
		[[ -n "$port" ]] && break
		sleep 0.05
	done
	if [[ -n "$port" && $kind == C ]]; then
		out=$("${cli[@]}" timeout 120 "${pre[@]}" "$STATIC_ECHO" pingpong 127.0.0.1 "$port" 20000 |
			sed -n 's/^rtt_ns \([0-9]*\)$/\1/p')
	elif [[ -n "$port" ]]; then
		out=$("${cli[@]}" timeout 120 "${pre[@]}" "$prog" pingpong 127.0.0.1:"$port" 20000 |
			sed -n 's/^rtt avg=\([0-9]*\) .*/\1/p')
	fi
	unserve
	# and the CPU time of every process of the round (server, client and
	# their wrappers: the reaped children of this subshell), per round trip
	# (times itself in this shell: a pipe or $() would ask a new one)
	times >"$TMP/times"
	[[ -n "$out" ]] && echo "$out $(sed -n 2p "$TMP/times" | awk '{
		split($1, u, "m"); split($2, k, "m")
		printf "%.0f", ((u[1] * 60 + u[2]) + (k[1] * 60 + k[2])) * 1e9 / 20000 }')"
}

# gonet_start SIDE PORT: gonet's net/http server answering /hello.
gonet_start() {
	http_bg "$1" "$2" "$GONET" http 127.0.0.1:"$2"
}

bench_http_apache() {
	if [[ "$(id -u)" != 0 ]]; then
		echo "bench: http_apache needs root (apache2 changes users); skipped" >&2
		return 0
	fi
	http_bench apache_start /small.html \
		"apache2 event MPM (2 children of 8 threads), 1 KiB file, ab -c8 without keep-alive, unpinned" ab
}

bench_http_haproxy() {
	http_bench haproxy_nginx_start /small.html \
		"haproxy (2 threads, reusing its connections) → nginx, 1 KiB file, ab -c8 without keep-alive, unpinned" ab
}

bench_http_node() {
	http_bench node_start / \
		"node http server, wrk -t2 -c16 with \`Connection: close\`, unpinned" wrk-close
}

# --- (f) gateways: a node without a route reaches an outside host through
# osfgw (node under osf, route "gateway") or through a socat relay (plain
# kernel TCP relay, the node connects to it), in the same three network
# namespaces (node ─ gateway ─ outside, as tests/gateway_test.go), same run.
# gw_teardown stops what bench_gateway started (also on exit).
gw_teardown() {
	local p n
	for p in "${GW_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${GW_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "${GW_NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	GW_PIDS=() GW_NS=()
}

# gw_bg NS CMD... starts CMD in namespace NS in the background.
gw_bg() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@" >>"$TMP/gw.out" 2>&1 &
	GW_PIDS+=($!)
}

# gw_wait_listen NS PORT waits until something listens on PORT in NS.
gw_wait_listen() {
	local i
	for ((i = 0; i < 200; i++)); do
		[[ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2")" ]] && return 0
		sleep 0.025
	done
	echo "bench: nothing listens on port $2 in $1" >&2
	cat "$TMP/gw.out" >&2
	return 1
}

bench_gateway() {
	local t="osfb$$" n=node g=gw o=out key="$TMP/gw.key" gwbin="$BUILD/bin/osfgw"
	local node="${t}n" gw="${t}g" out="${t}o"
	command -v socat >/dev/null || { echo "bench: socat is not installed (make deps)" >&2; return 1; }
	GW_NS=("$node" "$gw" "$out")
	for n in "${GW_NS[@]}"; do ip netns add "$n"; ip -n "$n" link set lo up; done
	ip link add "${t}vn" type veth peer name "${t}vg"
	ip link add "${t}vh" type veth peer name "${t}vo"
	ip link set "${t}vn" netns "$node"; ip link set "${t}vg" netns "$gw"
	ip link set "${t}vh" netns "$gw"; ip link set "${t}vo" netns "$out"
	ip -n "$node" addr add 10.88.1.2/24 dev "${t}vn"; ip -n "$node" link set "${t}vn" up
	ip -n "$gw" addr add 10.88.1.1/24 dev "${t}vg"; ip -n "$gw" link set "${t}vg" up
	ip -n "$gw" addr add 10.88.2.1/24 dev "${t}vh"; ip -n "$gw" link set "${t}vh" up
	ip -n "$out" addr add 10.88.2.2/24 dev "${t}vo"; ip -n "$out" link set "${t}vo" up
	head -c 32 /dev/urandom | base64 >"$key"
	chmod 600 "$key"

	gw_bg "$out" iperf3 -s -B 10.88.2.2 -p 5201
	gw_bg "$out" redis-server --port 6379 --bind 10.88.2.2 --protected-mode no --save '' --appendonly no
	gw_bg "$gw" taskset -c $SRV_CPU "$gwbin" --listen 10.88.1.1:7000 --key "$key" --allow 10.88.2.2
	# The same gateway for a node on its host: the stream to it is shm.
	gw_bg "$gw" taskset -c $SRV_CPU "$gwbin" --listen 10.88.1.1:7001 --key "$key" --allow 10.88.2.2 \
		--node-netns "/run/netns/$node"
	gw_bg "$gw" taskset -c $SRV_CPU socat TCP-LISTEN:7101,bind=10.88.1.1,fork,reuseaddr,backlog=256,nodelay TCP:10.88.2.2:5201,nodelay
	gw_bg "$gw" taskset -c $SRV_CPU socat TCP-LISTEN:7102,bind=10.88.1.1,fork,reuseaddr,backlog=256,nodelay TCP:10.88.2.2:6379,nodelay
	gw_wait_listen "$out" 5201
	gw_wait_listen "$out" 6379
	gw_wait_listen "$gw" 7000
	gw_wait_listen "$gw" 7001
	gw_wait_listen "$gw" 7101
	gw_wait_listen "$gw" 7102
	local json side csv r
	declare -A gbps rps osfenv
	osfenv[osfgw]="gateway 10.88.1.1:7000 10.88.2.0/24"     # kernel TCP to the gateway
	osfenv[osfgw-shm]="gateway 10.88.1.1:7001 10.88.2.0/24" # shm to the gateway
	# Three alternating rounds, the median of each side: a shared
	# machine's load changes hit all alike.
	for r in 1 2 3; do
		for side in socat osfgw osfgw-shm; do
			if [[ $side == socat ]]; then
				json=$(ip netns exec "$node" taskset -c $CLI_CPU timeout 120 iperf3 -c 10.88.1.1 -p 7101 -t 3 -J)
			else
				json=$(ip netns exec "$node" taskset -c $CLI_CPU timeout 120 env LD_PRELOAD="$LIB" \
					"OSF_ROUTES=${osfenv[$side]}" OSF_GATEWAY_KEY="$key" iperf3 -c 10.88.2.2 -p 5201 -t 3 -J)
			fi
			gbps[$side]+=" $(jq '.end.sum_received.bits_per_second / 1e9 * 100 | round / 100' <<<"$json")"
			if [[ $side == socat ]]; then
				csv=$(ip netns exec "$node" taskset -c $CLI_CPU timeout 120 redis-benchmark -h 10.88.1.1 -p 7102 -t get -n 50000 -q --csv)
			else
				csv=$(ip netns exec "$node" taskset -c $CLI_CPU timeout 120 env LD_PRELOAD="$LIB" \
					"OSF_ROUTES=${osfenv[$side]}" OSF_GATEWAY_KEY="$key" redis-benchmark -h 10.88.2.2 -p 6379 -t get -n 50000 -q --csv)
			fi
			rps[$side]+=" $(awk -F'"' '$2 == "GET" { print $4 }' <<<"$csv")"
		done
	done
	for side in socat osfgw osfgw-shm; do
		raw "gateway iperf3 via $side, 3 s runs (Gbit/s):${gbps[$side]}"
		raw "gateway redis-benchmark GET via $side, 50,000 requests (req/s):${rps[$side]}"
		gbps[$side]=$(stats median ${gbps[$side]})
		rps[$side]=$(stats median ${rps[$side]})
	done
	row "node → outside through a gateway: iperf3, 1 stream, median of 3 × 3 s (Gbit/s; bare = socat relay, osf = osfgw)" \
		"${gbps[socat]}" "${gbps[osfgw]}" "$(ratio "${gbps[osfgw]}" "${gbps[socat]}")" "≥ 1x"
	row "node → outside through a gateway: redis-benchmark GET, 50 clients, median of 3 (req/s; bare = socat relay, osf = osfgw)" \
		"${rps[socat]}" "${rps[osfgw]}" "$(ratio "${rps[osfgw]}" "${rps[socat]}")" "≥ 1x"
	row "node → outside through a gateway on the node's host (shm leg): iperf3, 1 stream, median of 3 × 3 s (Gbit/s; bare = socat relay, osf = osfgw)" \
		"${gbps[socat]}" "${gbps[osfgw-shm]}" "$(ratio "${gbps[osfgw-shm]}" "${gbps[socat]}")" "≥ 1x"
	row "node → outside through a gateway on the node's host (shm leg): redis-benchmark GET, 50 clients, median of 3 (req/s; bare = socat relay, osf = osfgw)" \
		"${rps[socat]}" "${rps[osfgw-shm]}" "$(ratio "${rps[osfgw-shm]}" "${rps[socat]}")" "≥ 1x"
	gw_teardown
}

main() {
	# Arguments select benchmarks by name (e.g. `run.sh redis iperf3`);
	# none runs them all.
	local rc all=(syscall_loop startup core_load churn churn_unpinned short_client http_nginx http_apache http_haproxy http_node asyncio go static fork idle_memory shm_pingpong busy_pingpong shm_stream iperf3 redis gateway) b
	(($#)) || set -- "${all[@]}"
	echo "osf benchmarks on $(hostname), $(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
	echo "build: $BUILD" >&2
	# Each benchmark runs in a subshell that cleans up after itself, so
	# that one that fails (a client past its time bound on a loaded
	# host) costs its own rows, not the run: its row says so and the
	# others go on.
	for b in "$@"; do
		echo "measuring: $b..." >&2
		# Not an if or ||: errexit must hold inside the subshell.
		set +e
		(
			set -e
			trap 'kill $SRV_PID "${SRV_MORE[@]}" 2>/dev/null || true; gw_teardown' EXIT
			"bench_$b"
			declare -p ROWS RAW PORT >"$TMP/state"
		)
		rc=$?
		set -e
		if ((rc == 0)); then
			source <(sed -e 's/^declare -- /declare -g /' -e 's/^declare -\([a-zA-Z]*\) /declare -g\1 /' "$TMP/state")
		else
			ROWS+=("| $b: failed (exit $rc; its output is above) | | | | |")
			PORT=$((PORT + 100))
		fi
	done

	echo
	echo "| what | bare | under libosf.so | difference | target |"
	echo "|---|---|---|---|---|"
	printf '%s\n' "${ROWS[@]}"
	echo
	echo "Raw numbers:"
	echo '```'
	printf '%s\n' "${RAW[@]}"
	echo '```'
}

main "$@"
