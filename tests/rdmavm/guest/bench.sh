# make bench-rdma, in both guests (A 10.77.0.1 serves, B 10.77.0.2 is the
# client): osf vs kernel TCP over the same wire vs rsocket (librspreload,
# both ends preloaded) vs the device's own limit (ib_send_lat, ib_write_bw),
# one run. Under emulation only the ratios mean anything.
. "$OSF_ROOT/tests/rdmavm/guest/lib.sh"
PERF=$BIN/osfperf
RSP=$(ls /usr/lib/x86_64-linux-gnu/rsocket/librspreload.so 2>/dev/null)
PINGS=${BENCH_PINGS:-3000}
STREAM=${BENCH_STREAM:-256M}
CONNS=${BENCH_CONNS:-30}
REDIS_N=${BENCH_REDIS_N:-20000}
barrier up 300 || exit 1

under=$GUESTDIR/under

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
		if [ "$lport" = - ]; then sleep 5; else wait_listen "$lport"; fi
		barrier "$name-go" 600
		# evidence that rsocket's runs use RDMA: the connection manager's ids
		case $name in *-rsocket) sleep 2; rdma res show cm_id >"$OUT/bench-$name.cmid" 2>&1 ;; esac
		barrier "$name-done" $((bound + 600))
		kill $sp 2>/dev/null
		wait $sp 2>/dev/null
	else
		barrier "$name-go" 600
		timeout -k 5 "$bound" "${cli[@]}" >"$OUT/bench-$name.out" 2>&1
		echo "  $name: exit $?: $(tail -c 400 "$OUT/bench-$name.out" | tr '\r\n' '  ')"
		barrier "$name-done"
	fi
}

# the connection set-up rate: CONNS connect, 1-byte exchange, close
cat >/tmp/connrate.py <<'EOF'
import socket, sys, time
mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    # accept, recv, send, close through libc: Python's accept is accept4,
    # which rsocket's preload library does not intercept
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port)); ls.listen(128)
    buf = ctypes.create_string_buffer(1)
    for _ in range(n):
        c = libc.accept(ls.fileno(), None, None)
        assert c >= 0, ctypes.get_errno()
        libc.recv(c, buf, 1, 0); libc.send(c, buf, 1, 0); libc.close(c)
else:
    t0 = time.monotonic()
    for _ in range(n):
        c = socket.create_connection((host, port)); c.sendall(b"x")
        assert c.recv(1) == b"x"; c.close()
    dt = time.monotonic() - t0
    print(f"connections={n} secs={dt:.3f} per_s={n / dt:.2f}")
EOF

port=7400
for t in kernel osf rsocket; do
	if [ "$t" = rsocket ] && [ -z "$RSP" ]; then
		echo "no librspreload.so (librdmacm1): rsocket skipped"
		continue
	fi
	lp() { if [ "$t" = rsocket ]; then echo -; else echo $port; fi; } # rsocket's listeners are not the kernel's
	port=$((port + 1))
	step "pp-$t" 600 "$(lp)" "$under" $t "$PERF" server -a 10.77.0.1 -p $port -1 -- \
		"$under" $t "$PERF" client -a 10.77.0.1 -p $port -t pingpong -s 64 -n "$PINGS" --warmup 200 --json
	port=$((port + 1))
	step "st-$t" 600 "$(lp)" "$under" $t "$PERF" server -a 10.77.0.1 -p $port -1 -- \
		"$under" $t "$PERF" client -a 10.77.0.1 -p $port -t stream -b "$STREAM" -w 64K --json
	port=$((port + 1))
	step "cr-$t" 600 "$(lp)" "$under" $t python3 /tmp/connrate.py server 10.77.0.1 $port "$CONNS" -- \
		"$under" $t python3 /tmp/connrate.py client 10.77.0.1 $port "$CONNS"
	port=$((port + 1))
	step "redis-$t" 150 "$(lp)" "$under" $t redis-server --bind 10.77.0.1 --port $port --save '' --appendonly no --protected-mode no -- \
		"$under" $t redis-benchmark -h 10.77.0.1 -p $port -t get,set -n "$REDIS_N" -c 10 -q --csv
done
step "dev-lat" 300 - ib_send_lat -d rxe0 -R -F -n 3000 -- ib_send_lat -d rxe0 -R -F -n 3000 10.77.0.1
step "dev-bw" 300 - ib_write_bw -d rxe0 -R -F -D 5 -- ib_write_bw -d rxe0 -R -F -D 5 10.77.0.1

if [ "$GUEST" = B ]; then
	python3 "$GUESTDIR/benchtable.py" "$OUT" | tee "$OUT/table.md"
fi
barrier end 600
