#!/bin/sh
# run.sh: the D2 spike's measurements, variants alternating within each round
# (docs/D2-PROPOSAL.md). Each program runs in a network namespace of its own.
#   sh run.sh churn ROUNDS N      churn: tcp, osf (tcp under libosf.so), pool, fresh, spin, nohello, bound, pair,
#                                 segment, step1 (unixchurn: today's shape, step 1 of the plan)
#   sh run.sh wake ROUNDS N       wake-ups: unix, tcp, futex, eventfd, tcpdata
#   sh run.sh idle N              idle connections: tcp, osf, pool, sparse
# LIBOSF selects the libosf.so (default /work/main/build/libosf.so).
set -e
cd "$(dirname "$0")"
LIBOSF=${LIBOSF:-/work/main/build/libosf.so}
make -s -f Makefile >/dev/null
ns() { unshare -n sh -c "ip link set lo up; $1"; }
case "$1" in
churn)
	for r in $(seq "$2"); do
		for pin in 1 0; do
			for v in tcp osf pool fresh spin nohello bound pair segment step1; do
				if [ $v = segment ] || [ $v = step1 ]; then
					ns "timeout 60 ./unixchurn $v $3 $pin 5000" | sed "s/^/round=$r load=$(cut -d' ' -f1 /proc/loadavg) /"
				elif [ $v = osf ]; then
					ns "LD_PRELOAD=$LIBOSF timeout 60 ./churn tcp $3 $pin 5000" | sed "s/^tcp/osf/;s/^/round=$r load=$(cut -d' ' -f1 /proc/loadavg) /"
				else
					ns "timeout 60 ./churn $v $3 $pin 5000" | sed "s/^/round=$r load=$(cut -d' ' -f1 /proc/loadavg) /"
				fi
			done
		done
	done ;;
wake)
	for r in $(seq "$2"); do
		for pin in 1 0; do
			for m in unix tcp futex eventfd tcpdata; do
				ns "timeout 60 ./wake $m $3 $pin" | sed "s/^/round=$r load=$(cut -d' ' -f1 /proc/loadavg) /"
			done
		done
	done ;;
idle)
	for v in tcp osf pool sparse; do
		echo "load=$(cut -d' ' -f1 /proc/loadavg)"
		if [ $v = osf ]; then
			ns "ulimit -Sn 8192; LD_PRELOAD=$LIBOSF timeout 120 ./idle tcp $2 2>/dev/null" | sed 's/^tcp/osf/'
		else
			ns "ulimit -Sn 8192; timeout 120 ./idle $v $2"
		fi
	done ;;
*) echo "usage: run.sh churn|wake ROUNDS N | idle N" >&2; exit 2 ;;
esac
