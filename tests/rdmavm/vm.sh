#!/bin/bash
# vm.sh — two hosts with a real verbs device for osf's RDMA path: boots
# Debian's stock kernel (which has rdma_rxe, soft-RoCE) in two qemu guests
# joined by one virtual Ethernet wire, runs one script in both as root and
# powers them off.
#
#   tests/rdmavm/vm.sh GUEST_SCRIPT [ARGS...]
#
# Guest A is 10.77.0.1/24, guest B 10.77.0.2/24, each with rxe0 on eth0 (two
# guests, not two network namespaces in one: the 6.1 kernel's rxe sends only
# from the initial namespace). The wire is qemu's -netdev stream over a unix
# socket of this host: no guest traffic leaves qemu.
#
# A guest's root is this machine's / over virtio-9p, read-only, under an
# overlay with a tmpfs upper layer: the guests see the project (built on
# this host) and every installed program, and write nowhere on the host
# except $OUT (below), shared read-write at the same path in both guests.
# The script runs with $OUT as cwd and gets GUEST (A or B), ADDR, PEER and
# PEER_ADDR; its output, prefixed "A| " or "B| ", is also saved in
# $OUT/guest-A.log and guest-B.log. vm.sh exits with A's status, else B's.
#
# Exit 77 (with "SKIP: reason") when qemu cannot run here: not root, no
# qemu-system-x86_64, no kernel with rdma_rxe, no static busybox.
#
# Environment: RDMAVM_OUT (default build/rdmavm/out), RDMAVM_MEM (MiB per
# guest, 2048), RDMAVM_SMP (vCPUs per guest, 2), RDMAVM_TIMEOUT (seconds
# before the guests are killed, 2400), RDMAVM_NICE (qemu's niceness, 5).
#
# qemu runs with TCG (software emulation): /dev/kvm on the machines this
# was written on is kvm_pvm, under which a stock kernel does not boot.
# Everything in the guests is 5-20x slower than on the host. The kernel
# gets no_timer_check: on a busy host its boot-time check of the emulated
# IO-APIC timer was seen to fail ("IO-APIC + timer doesn't work!", a panic).
set -uo pipefail

skip() { echo "SKIP: $*"; exit 77; }
[ $# -ge 1 ] || { echo "usage: $0 GUEST_SCRIPT [ARGS...]" >&2; exit 2; }
script=$(readlink -f "$1")
shift
[ -r "$script" ] || { echo "$0: cannot read $script" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || skip "needs root (qemu must export the whole root filesystem to the guests)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (make deps-rdma)"
kver=$(ls /lib/modules 2>/dev/null | grep -- '-amd64$' | sort -V | tail -n1)
[ -n "$kver" ] && [ -r "/boot/vmlinuz-$kver" ] || skip "no Debian amd64 kernel in /boot and /lib/modules (make deps-rdma)"
moddir=/lib/modules/$kver
grep -q '/rdma_rxe\.ko' "$moddir/modules.dep" || skip "kernel $kver has no rdma_rxe module"
[ -x /bin/busybox ] && file -L /bin/busybox | grep -q 'statically linked' ||
	skip "no static /bin/busybox (make deps-rdma)"
for t in cpio gzip timeout nice; do command -v $t >/dev/null || skip "$t is missing"; done

work=$root/build/rdmavm
mkdir -p "$work"
out=$(mkdir -p "${RDMAVM_OUT:-$work/out}" && readlink -f "${RDMAVM_OUT:-$work/out}")
mem=${RDMAVM_MEM:-2048}
smp=${RDMAVM_SMP:-2}
limit=${RDMAVM_TIMEOUT:-2400}
niceness=${RDMAVM_NICE:-5}

# ---- the initramfs: busybox, the modules that mount the root, /init ------
initrd=$work/initrd-$kver.cpio.gz
sum=$(cat "$0" "$here/init.sh" "$here/stage2.sh" | md5sum | cut -c1-16)
if [ ! -s "$initrd" ] || [ "$(cat "$initrd.sum" 2>/dev/null)" != "$sum" ]; then
	tmp=$(mktemp -d "$work/initrd.XXXXXX")
	mkdir -p "$tmp"/{bin,mods,proc,sys,dev,lower,rw,newroot}
	cp /bin/busybox "$tmp/bin/busybox"
	declare -A have=()
	load=()
	# need MODULE-PATH: MODULE-PATH after its dependencies (modules.dep)
	need() {
		local m=$1 d
		[ -n "${have[$m]:-}" ] && return
		have[$m]=1
		for d in $(grep -E "^$m:" "$moddir/modules.dep" | cut -d: -f2); do need "$d"; done
		load+=("$m")
	}
	for name in virtio_pci 9pnet_virtio 9p overlay; do
		p=$(grep -E "/$name\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | cut -d: -f1)
		[ -n "$p" ] || { echo "$0: no module $name in $moddir" >&2; exit 2; }
		need "$p"
	done
	for m in "${load[@]}"; do
		b=$(basename "$m")
		b=${b%.ko*}
		case $m in
		*.ko.xz) xz -dc "$moddir/$m" >"$tmp/mods/$b.ko" ;;
		*.ko.zst) zstd -qdc "$moddir/$m" >"$tmp/mods/$b.ko" ;;
		*.ko.gz) gzip -dc "$moddir/$m" >"$tmp/mods/$b.ko" ;;
		*) cp "$moddir/$m" "$tmp/mods/$b.ko" ;;
		esac
		echo "$b" >>"$tmp/mods/list"
	done
	cp "$here/init.sh" "$tmp/init"
	cp "$here/stage2.sh" "$tmp/stage2"
	chmod +x "$tmp/init"
	(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp" && mv "$initrd.tmp" "$initrd"
	echo "$sum" >"$initrd.sum"
	rm -rf "$tmp"
fi
cp "$script" "$out/.script"
if [ $# -gt 0 ]; then printf "%q " "$@"; fi >"$out/.args"
rm -f "$out"/.rc-* "$out"/.bar-*

# cleanup kills the guests' qemu processes (their -pidfile, in $out so that
# runs with different output directories never touch each other's) if still running
cleanup() {
	local f
	for f in "$out"/.qemu-[AB].pid; do
		[ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
		rm -f "$f"
	done
	rm -f "$sock"
}
sock=$(mktemp -u "$work/wire.XXXXXX")
trap cleanup EXIT
trap 'exit 130' INT TERM

# guest ROLE ADDR PEER NETDEV-OPTS MAC: one guest, output prefixed, in the background
guest() {
	local role=$1 addr=$2 peer=$3 netdev=$4 mac=$5
	nice -n "$niceness" timeout -k 10 "$limit" qemu-system-x86_64 \
		-accel tcg,thread=multi,tb-size=512 -cpu max -smp "$smp" -m "$mem" \
		-name "osf-rdmavm-$role" -pidfile "$out/.qemu-$role.pid" -nodefaults -no-user-config -display none -no-reboot \
		-serial stdio -monitor none \
		-kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off no_timer_check rdinit=/init osf.out=$out osf.root=$root osf.role=$role osf.addr=$addr osf.peer=$peer" \
		-fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
		-fsdev local,id=out,path="$out",security_model=none,multidevs=remap \
		-device virtio-9p-pci,fsdev=out,mount_tag=osfout \
		-netdev "stream,id=wire,addr.type=unix,addr.path=$sock,$netdev" \
		-device "virtio-net-pci,netdev=wire,mac=$mac" </dev/null 2>&1 | sed -u "s/^/$role| /" &
}

start=$(date +%s)
guest A 10.77.0.1 10.77.0.2 server=on 52:54:00:77:00:01
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "$0: guest A's qemu did not open the wire" >&2; exit 1; }
guest B 10.77.0.2 10.77.0.1 server=off 52:54:00:77:00:02
wait
echo "vm.sh: guests done after $(( $(date +%s) - start ))s"
rc=
for r in A B; do
	if [ -f "$out/.rc-$r" ]; then
		v=$(cat "$out/.rc-$r")
	else
		echo "vm.sh: guest $r's script did not finish"
		v=125
	fi
	[ -z "$rc" ] || [ "$rc" = 0 ] && rc=$v
done
exit "$rc"
