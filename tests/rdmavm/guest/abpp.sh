# Interleaved A/B of the RDMA ping-pong, in both guests (A serves, B is the
# client): ROUNDS rounds of every variant, one after another, in one boot.
#   abpp.sh ROUNDS VARIANT...
# VARIANT is NAME=TRANSPORT[,VAR=VALUE...]: TRANSPORT kernel, rsocket, or
# a directory holding libosf.so and libosfcore.so (osf from that build),
# the VAR=VALUE pairs set in both processes' environments. Per run, B
# prints one line: "ab NAME ROUND p50 p99 guest CPU ms per round trip (A, B)
# switches-per-rt(A,B)". The CPU figure counts the whole guest (B's from
# before the client starts, its core's load included); the switches are
# osfperf's threads' (voluntary + involuntary) from the last of samples
# taken every 0.5 s, best effort (a sample that missed the end shows ~1).
. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
rounds=$1
shift
PERF=$BIN/osfperf
RSP=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
PINGS=${AB_PINGS:-1000}
barrier up 300 || exit 1

# switches PROG: context switches of PROG's threads so far (latest sample)
switches_loop() {
	local pid t n
	for _ in $(seq 300); do pid=$(pgrep -n -x osfperf) && break; nap 0.1; done
	[ -n "$pid" ] || return
	while kill -0 "$pid" 2>/dev/null; do
		n=0
		for t in /proc/$pid/task/*; do
			n=$((n + $(awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n + 0}' "$t/status" 2>/dev/null || echo 0)))
		done
		[ "$n" -gt 0 ] && echo "$n" >"$1"
		nap 0.5
	done
}

run() { # NAME TRANSPORT VARS ROLE ARGS...
	local name=$1 t=$2 vars=$3 role=$4
	shift 4
	local -a env=()
	[ -n "$vars" ] && IFS=, read -r -a env <<<"$vars"
	case $t in
	kernel) env "${env[@]}" "$PERF" "$role" "$@" ;;
	rsocket) env "${env[@]}" LD_PRELOAD=$RSP "$PERF" "$role" "$@" ;;
	*) env "${env[@]}" LD_PRELOAD="$t/libosf.so" "OSF_ROUTES=$ROUTES" OSF_LOG_FILE="$OUT/osf-ab-$name-$GUEST.log" \
		"$PERF" "$role" "$@" ;;
	esac
}

export -f run
export RSP PERF OUT GUEST ROUTES
port=7600
for r in $(seq "$rounds"); do
	for v in "$@"; do
		side_spec "$v"
		port=$((port + 1))
		tag=$name-$r
		sw=$OUT/.sw-$tag-$GUEST
		c0=$(cpu)  # B: from before the client starts (its core load included)
		if [ "$GUEST" = A ]; then
			timeout -k 5 300 bash -c 'run "$@"' run "$name" "$t" "$vars" server -a 10.77.0.1 -p $port -1 >"$OUT/ab-$tag.srv" 2>&1 &
			sp=$!
			switches_loop "$sw" &
			if [ "$t" = rsocket ]; then wait_cm_listen $port; else wait_listen $port; fi
			c0=$(cpu)
			barrier "$tag-go" 600
			barrier "$tag-done" 900
			kill $sp 2>/dev/null
			wait
			echo "$(($(cpu) - c0))" >"$OUT/.cpu-$tag-A"
			barrier "$tag-cpu" 60
		else
			barrier "$tag-go" 600
			switches_loop "$sw" &
			timeout -k 5 300 bash -c 'run "$@"' run "$name" "$t" "$vars" client -a 10.77.0.1 -p $port -t pingpong -s 64 -n $PINGS --warmup 200 --json >"$OUT/ab-$tag.out" 2>&1
			wait
			cb=$(($(cpu) - c0))
			barrier "$tag-done"
			barrier "$tag-cpu" 60
			n=$((PINGS + 200))
			echo "ab $name $r $(python3 -c "import json,sys
for l in open('$OUT/ab-$tag.out'):
    if l.startswith('{'):
        d = json.loads(l); print(d['p50'], d['p99']); break
else:
    print('fail fail')") cpu/rt $(awk -v a="$(cat "$OUT/.cpu-$tag-A")" -v b="$cb" -v n=$n 'BEGIN {printf "%.2f %.2f", a * 10 / n, b * 10 / n}') sw/rt $(awk -v a="$(cat "$OUT/.sw-$tag-A" 2>/dev/null || echo 0)" -v b="$(cat "$sw" 2>/dev/null || echo 0)" -v n=$n 'BEGIN {printf "%.1f %.1f", a / n, b / n}')"
		fi
	done
done
barrier end 600
