# cpuwho.sh VARIANT...: per variant (abpp.sh's NAME=T[,VARS]) one ping-pong
# in both guests; each guest prints the tasks (threads, kernel ones too)
# whose CPU ticks grew most during it, and the whole guest's ticks.
. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
PERF=$BIN/osfperf
RSP=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
PINGS=${AB_PINGS:-1000}
barrier up 300 || exit 1
snap() { local q; for q in /proc/[0-9]*/task/[0-9]*; do awk -v t="${q##*/}" '{c=$0; sub(/^[^)]*\) /,"",c); split(c,f," "); n=$2; print t, n, f[12]+f[13]}' "$q/stat" 2>/dev/null; done; }
# runp NAME T VARS ROLE ARGS...: osfperf ROLE over T; its rusage (CPU
# ms of all its threads, context switches) in $OUT/.ru-NAME-GUEST
runp() { local name=$1 t=$2 vars=$3 role=$4; shift 4
	local ru=$OUT/.ru-$name-$GUEST
	local -a env=(); [ -n "$vars" ] && IFS=, read -r -a env <<<"$vars"
	case $t in
	kernel) ;;
	rsocket) env+=(LD_PRELOAD=$RSP) ;;
	*) env+=(LD_PRELOAD="$t/libosf.so" "OSF_ROUTES=$ROUTES" OSF_LOG_FILE="$OUT/osf-cw-$name-$GUEST.log") ;;
	esac
	python3 -c 'import os, resource, subprocess, sys
e = dict(os.environ); e.update(a.split("=", 1) for a in sys.argv[2:sys.argv.index("--")])
rc = subprocess.call(sys.argv[sys.argv.index("--") + 1:], env=e)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.1f %.1f %d %d\n" % (r.ru_utime * 1e3, r.ru_stime * 1e3, r.ru_nvcsw, r.ru_nivcsw))
sys.exit(rc)' "$ru" "${env[@]}" -- "$PERF" "$role" "$@"; }
port=7700
for v in "$@"; do
	side_spec "$v"; port=$((port + 1))
	if [ "$GUEST" = A ]; then
		runp "$name" "$t" "$vars" server -a 10.77.0.1 -p $port -1 >"$OUT/cw-$name.srv" 2>&1 &
		sp=$!
		if [ "$t" = rsocket ]; then wait_cm_listen $port; else wait_listen $port; fi
		barrier "$name-go" 600
	else
		barrier "$name-go" 600
	fi
	nap 3
	snap >"$OUT/.s0-$name-$GUEST"; c0=$(cpu)
	if [ "$GUEST" = B ]; then
		runp "$name" "$t" "$vars" client -a 10.77.0.1 -p $port -t pingpong -s 64 -n $PINGS --warmup 200 --json >"$OUT/cw-$name.out" 2>&1
		snap >"$OUT/.s1-$name-$GUEST"; c1=$(cpu)
		barrier "$name-done" 900
	else
		barrier "$name-done" 900
		snap >"$OUT/.s1-$name-$GUEST"; c1=$(cpu)
		wait $sp
	fi
	n=$((PINGS + 200))
	echo "cw $name $GUEST osfperf (user sys ms, vol invol switches) per rt: $(awk -v n=$n '{printf "%.3f %.3f %.2f %.2f", $1/n, $2/n, $3/n, $4/n}' "$OUT/.ru-$name-$GUEST")"
	echo "cw $name $GUEST total ms/rt $(awk -v d=$((c1 - c0)) -v n=$n 'BEGIN{printf "%.2f", d*10/n}') $(grep -m1 '^{' "$OUT/cw-$name.out" 2>/dev/null | cut -c1-80)"
	awk -v n=$n 'NR==FNR {a[$1]=$3; next} {d=$3-($1 in a ? a[$1] : 0); if (d>0) print d*10/n, $2, $1}' "$OUT/.s0-$name-$GUEST" "$OUT/.s1-$name-$GUEST" | sort -rn | head -8 | sed "s/^/cw $name $GUEST   /"
	barrier "$name-end" 600
done
barrier end 600
