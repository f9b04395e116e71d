#!/bin/sh
# tests/bench/linkrate.sh [ROUNDS] [N]: connection set-up over the RDMA
# stand-in (OSF_DEBUG_RDMA_SIM=1) with a connection per dial against
# streams on a link (OSF_RDMA_LINKS=1), and kernel TCP, in interleaved
# rounds: tests/rdmavm/guest/connrate.py (connect, 1 byte each way,
# close; N timed connections) in a private network namespace. Prints one
# line per round and side: the client's conn/s and CPU ms per
# connection, the server's CPU ms per connection (docs/RDMA.md, "Links").
set -eu
if [ -z "${LINKRATE_IN_NETNS:-}" ]; then
	exec env LINKRATE_IN_NETNS=1 unshare -n -- sh -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LIB="${OSFTEST_BUILD_DIR:-$ROOT/build}/libosf.so"
CR="$ROOT/tests/rdmavm/guest/connrate.py"
ROUNDS="${1:-3}"
N="${2:-300}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SIM="LD_PRELOAD=$LIB OSF_TRANSPORT=rdma OSF_DEBUG_RDMA_SIM=1 OSF_STRICT=1"
port=24000
for round in $(seq "$ROUNDS"); do
	for side in kernel sim links; do
		port=$((port + 1))
		case $side in
		kernel) env="OSF_NONE=1" ;;
		sim) env="$SIM" ;;
		links) env="$SIM OSF_RDMA_LINKS=1" ;;
		esac
		# shellcheck disable=SC2086 # env is a list of assignments
		env $env python3 "$CR" server 127.0.0.1 "$port" "$N" >"$OUT/srv" 2>&1 &
		srv=$!
		for _ in $(seq 50); do grep -q listening "$OUT/srv" && break; sleep 0.1; done
		sleep 0.5 # the RDMA listener follows the kernel's
		# shellcheck disable=SC2086
		env $env timeout 120 python3 "$CR" client 127.0.0.1 "$port" "$N" >"$OUT/cli" 2>&1 || echo "client $side failed: $(cat "$OUT/cli")"
		wait "$srv" || echo "server $side failed: $(cat "$OUT/srv")"
		echo "round $round $side: $(head -1 "$OUT/cli") server $(grep cpu_ms "$OUT/srv" | head -1)"
	done
done
