# PID 1 of a tests/rdmavm guest, on the overlaid root: fresh /proc /sys /dev/pts
# /dev/shm /run, eth0 with the guest's address, soft-RoCE rxe0 on eth0, then
# the script vm.sh copied
# (OSF_ROOT is the project's directory, built on the host) to the shared directory; power off after it.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=0755 run /run
mkdir -p /run/netns /run/lock /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
for a in $(cat /proc/cmdline); do
	case $a in
	osf.out=*) OUT=${a#osf.out=} ;;
	osf.root=*) OSF_ROOT=${a#osf.root=} ;;
	osf.role=*) GUEST=${a#osf.role=} ;;
	osf.addr=*) ADDR=${a#osf.addr=} ;;
	osf.peer=*) PEER_ADDR=${a#osf.peer=} ;;
	esac
done
PEER=$([ "$GUEST" = A ] && echo B || echo A)
export OSF_ROOT OUT GUEST ADDR PEER PEER_ADDR
mkdir -p "$OUT"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 osfout "$OUT" || echo "rdmavm: cannot mount $OUT"
hostname "osf$GUEST"
ip link set lo up
modprobe virtio_net
ip addr add "$ADDR/24" dev eth0
ip link set eth0 up
modprobe -a rdma_rxe rdma_ucm ib_uverbs
rdma link add rxe0 type rxe netdev eth0
ulimit -l unlimited
ulimit -n 65536
echo "rdmavm: $GUEST up after $(cut -d' ' -f1 /proc/uptime)s: $(uname -r), $(nproc) vCPUs, $ADDR, $(rdma link show rxe0/1 | grep -o 'state [A-Z]*')"
cd "$OUT"
eval "set -- $(cat "$OUT/.args")"
bash "$OUT/.script" "$@" 2>&1 | tee "$OUT/guest-$GUEST.log"
rc=${PIPESTATUS[0]}
echo "$rc" >"$OUT/.rc-$GUEST"
echo "rdmavm: $GUEST's script exited $rc after $(cut -d' ' -f1 /proc/uptime)s"
sync
echo 1 >/proc/sys/kernel/sysrq
echo o >/proc/sysrq-trigger
sleep 10
