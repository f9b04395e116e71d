# make bench-rdma, in both guests (A 10.77.0.1 serves, B 10.77.0.2 is the
# client): osf vs kernel TCP over the same wire vs rsocket (librspreload,
# both ends preloaded) vs the device's own limit (ib_send_lat, ib_write_bw),
# one run. Under emulation only the ratios mean anything.
#   bench.sh [ROWS] [ts=T,T...] [rounds=N] [conns=N] [held=N]
#                     ROWS default "pp st cr redis ng dev": ping-pong,
#                     stream, connection rate, redis, nginx -> wrk, the
#                     device (perftest); qp (not by default): RC queue
#                     pairs per host pair with held=N (default 200)
#                     connections of one client open at once; ts=
#                     the transports (default kernel,osf,rsocket; osfalt:
#                     another build, see under), rounds= how many times
#                     the cr and ng rows run, transports interleaved (outputs
#                     bench-cr-T.out, then bench-cr.2-T.out...)
. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
ts="kernel osf rsocket"
rounds=1
args=()
for a in "$@"; do
	case $a in
	ts=*) ts=${a#ts=} ts=${ts//,/ } ;;
	rounds=*) rounds=${a#rounds=} ;;
	conns=*) BENCH_CONNS=${a#conns=} ;;
	held=*) BENCH_HELD=${a#held=} ;;
	*) args+=("$a") ;;
	esac
done
rows=" ${args[*]:-pp st cr redis ng dev} "
want() { [[ $rows == *" $1 "* ]]; }
PERF=$BIN/osfperf
RSP=$(ls /usr/lib/x86_64-linux-gnu/rsocket/librspreload.so 2>/dev/null)
PINGS=${BENCH_PINGS:-3000}
STREAM=${BENCH_STREAM:-256M}
CONNS=${BENCH_CONNS:-60}
REDIS_N=${BENCH_REDIS_N:-10000}
barrier up 300 || exit 1

under=$GUESTDIR/under

# threads NAME PROG: while PROG runs here, keep the latest per-thread view of
# it in $OUT/bench-NAME.threads-$GUEST: tid, name, context switches
# (voluntary+involuntary), CPU ticks (user+system), the system call it is
# in (35 nanosleep: Go's sysmon; 232 epoll_wait: osf's engine; 202 futex:
# an idle Go thread; 7 poll: the program). Where the time of a ping-pong
# or a stream
# goes: how many threads it wakes and how often.
# A view taken while the program exits (its threads gone, or a zombie's
# lone leader) is dropped: it used to replace the last whole one, and the
# files came out empty.
threads() {
	local f=$OUT/bench-$1.threads-$GUEST pid t
	for _ in $(seq 300); do pid=$(pgrep -n -x "$2") && break; nap 0.1; done
	[ -n "$pid" ] || return
	while running "$pid"; do
		for t in /proc/$pid/task/*; do
			[ -r "$t/stat" ] || continue
			echo "${t##*/} $(tr ' ' _ <"$t/comm") $(awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}' "$t/status" 2>/dev/null) $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) $(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
		done >"$f.tmp" 2>/dev/null
		if running "$pid" && [ -s "$f.tmp" ]; then mv "$f.tmp" "$f"; fi
		nap 0.5
	done
	rm -f "$f.tmp"
}

# running PID: the process exists and is not a zombie.
running() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "${st%% *}" != Z ]
}

# step NAME BOUND PORT SERVER-CMD -- CLIENT-CMD: the server on A
# (background; the client starts once PORT listens, or after 5 s for "-"),
# the client on B (output in $OUT/bench-NAME.out); both bounded
step() {
	local name=$1 bound=$2 lport=$3 sp
	shift 3
	local -a srv=() cli=()
	while [ "$1" != -- ]; do srv+=("$1"); shift; done
	shift
	cli=("$@")
	if [ "$GUEST" = A ]; then
		timeout -k 5 "$bound" "${srv[@]}" >"$OUT/bench-$name.srv" 2>&1 &
		sp=$!
		case $name in pp-* | st-*) threads "$name" osfperf & ;; esac
		case $lport in
		-) sleep 5 ;;
		cm:*) wait_cm_listen "${lport#cm:}" ;;
		*) wait_listen "$lport" ;;
		esac
		# evidence that rsocket's runs use RDMA: the connection manager's
		# ids (its listener, then its connections); benchtable.py shows no
		# rsocket figure without them
		case $name in *-rsocket) rdma res show cm_id >"$OUT/bench-$name.cmid" 2>&1 ;; esac
		barrier "$name-go" 600
		case $name in *-rsocket) sleep 0.5; rdma res show cm_id >>"$OUT/bench-$name.cmid" 2>&1 ;; esac
		barrier "$name-done" $((bound + 600))
		kill $sp 2>/dev/null
		wait $sp 2>/dev/null
	else
		barrier "$name-go" 600
		case $name in pp-* | st-*) threads "$name" osfperf & ;; esac
		timeout -k 5 "$bound" "${cli[@]}" >"$OUT/bench-$name.out" 2>&1
		wait
		echo "  $name: exit $?: $(tail -c 400 "$OUT/bench-$name.out" | tr '\r\n' '  ')"
		barrier "$name-done"
	fi
}

# the connection set-up rate: CONNS connect, 1-byte exchange, close (connrate.py)

port=7400
for t in $ts; do
	if [ "$t" = rsocket ] && [ -z "$RSP" ]; then
		echo "no librspreload.so (librdmacm1): rsocket skipped"
		continue
	fi
	lp() { if [ "$t" = rsocket ]; then echo cm:$port; else echo $port; fi; } # rsocket's listeners are not the kernel's
	port=$((port + 1))
	want pp && step "pp-$t" 600 "$(lp)" "$under" $t "$PERF" server -a 10.77.0.1 -p $port -1 -- \
		"$under" $t "$PERF" client -a 10.77.0.1 -p $port -t pingpong -s 64 -n "$PINGS" --warmup 200 --json
	port=$((port + 1))
	want st && step "st-$t" 600 "$(lp)" "$under" $t "$PERF" server -a 10.77.0.1 -p $port -1 -- \
		"$under" $t "$PERF" client -a 10.77.0.1 -p $port -t stream -b "$STREAM" -w 64K --json
	port=$((port + 1))
	# (the port the cr row had before it moved below: the redis row's stay)
	port=$((port + 1))
	want redis || continue
	if [ "$t" = rsocket ]; then
		# redis waits in epoll, which rdma-core 44's librspreload does not
		# intercept (nm -D: no epoll_*): it fails at start. Record how.
		if [ "$GUEST" = A ]; then
			timeout -k 5 60 "$under" rsocket redis-server --bind 10.77.0.1 --port $port --save '' --appendonly no \
				--protected-mode no >"$OUT/bench-redis-rsocket.srv" 2>&1
			echo "  redis-server under rsocket: exit $?: $(grep -m1 -iE 'error|unrecoverable' "$OUT/bench-redis-rsocket.srv" | cut -c1-200)"
		fi
		continue
	fi
	step "redis-$t" 600 "$(lp)" "$under" $t redis-server --bind 10.77.0.1 --port $port --save '' --appendonly no --protected-mode no -- \
		"$under" $t redis-benchmark -h 10.77.0.1 -p $port -t get,set -n "$REDIS_N" -c 10 -q --csv
done
# the cr row: rounds of each transport in turn (osf logs the set-up
# steps' laps at debug, a line or two per connection)
for r in $(seq "$rounds"); do
	sfx=
	[ "$r" = 1 ] || sfx=.$r
	for t in $ts; do
		[ "$t" = rsocket ] && [ -z "$RSP" ] && continue
		port=$((port + 1))
		lp=$port
		[ "$t" = rsocket ] && lp=cm:$port
		want cr && OSF_BENCH_LOG_LEVEL=debug step "cr$sfx-$t" 600 "$lp" "$under" $t python3 $GUESTDIR/connrate.py server 10.77.0.1 $port "$CONNS" -- \
			"$under" $t python3 $GUESTDIR/connrate.py client 10.77.0.1 $port "$CONNS"
	done
done
# the qp row: HELD connections of one client open at once; the RC queue
# pairs each end's process holds then (links.py hold; not rsocket:
# Python's sockets are SOCK_CLOEXEC, which librspreload leaves to the
# kernel, connrate.py)
for t in $ts; do
	[ "$t" = rsocket ] && continue
	port=$((port + 1))
	want qp && step "qp-$t" 900 $port "$under" $t python3 $GUESTDIR/links.py hold-server 10.77.0.1 $port "${BENCH_HELD:-200}" -- \
		"$under" $t python3 $GUESTDIR/links.py hold 10.77.0.1 $port "${BENCH_HELD:-200}"
done
# the ng row: nginx (2 workers: fork children of its master) serving a
# 6-byte file to wrk (2 threads, 8 connections, epoll, non-blocking),
# rounds of each transport in turn; rsocket cannot run it (epoll, as redis)
ngconf() {
	local d=/tmp/ng-$1
	mkdir -p "$d/www"
	echo hello >"$d/www/small.txt"
	cat >"$d/nginx.conf" <<-EOF
		worker_processes 2;
		daemon off;
		pid $d/nginx.pid;
		error_log $d/error.log;
		events { worker_connections 1024; }
		http {
			access_log off;
			client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d;
			uwsgi_temp_path $d; scgi_temp_path $d;
			sendfile on;
			server { listen 10.77.0.1:$1; root $d/www; }
		}
	EOF
	echo "$d/nginx.conf"
}
for r in $(seq "$rounds"); do
	sfx=
	[ "$r" = 1 ] || sfx=.$r
	for t in $ts; do
		[ "$t" = rsocket ] && continue
		port=$((port + 1))
		want ng && step "ng$sfx-$t" 300 $port "$under" $t nginx -c "$(ngconf $port)" -- \
			"$under" $t wrk -t 2 -c 8 -d "${BENCH_WRK_S:-20}s" --timeout 2s "http://10.77.0.1:$port/small.txt"
	done
done
want dev && step "dev-lat" 300 - ib_send_lat -d rxe0 -R -F -n 3000 -- ib_send_lat -d rxe0 -R -F -n 3000 10.77.0.1
want dev && step "dev-bw" 300 - ib_write_bw -d rxe0 -R -F -D 5 -- ib_write_bw -d rxe0 -R -F -D 5 10.77.0.1

if [ "$GUEST" = B ]; then
	python3 "$GUESTDIR/benchtable.py" "$OUT" | tee "$OUT/table.md"
fi
barrier end 600
