#!/bin/busybox sh
# /init of tests/rdmavm's initramfs: mount this machine's root (9p,
# read-only) under a tmpfs overlay and switch to it, running stage2.sh.
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /mods/list); do
	$B insmod /mods/$m.ko || echo "rdmavm: insmod $m failed"
done
die() { echo "rdmavm: $*"; $B poweroff -f; }
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || die "cannot mount the host's root"
$B mount -t tmpfs -o size=75%,mode=0755 rw /rw || die "cannot mount tmpfs"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || die "cannot mount the overlay"
$B cp /stage2 /newroot/.osf-stage2
$B umount /proc /sys
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /bin/bash /.osf-stage2
