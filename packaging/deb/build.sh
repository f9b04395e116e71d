#!/bin/bash
# build.sh BUILD VERSION: builds BUILD/osf_VERSION-1_ARCH.deb with dpkg-deb
# from `make install` into a staging tree (no network, no debhelper).
set -euo pipefail
build=$1 version=$2
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
root=$build/deb/root
rm -rf "$build/deb"
mkdir -p "$root/DEBIAN"
make -s install DESTDIR="$root" PREFIX=/usr LIBDIR="/usr/lib/$multiarch" SYSCONFDIR=/etc BUILD="$build"
# Debian policy: compressed manual pages and changelog, a copyright file,
# stripped C objects (the Go core keeps its symbol table: crash traces).
gzip -9n "$root"/usr/share/man/man*/*
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/lib/$multiarch/libosf.so" "$root/usr/lib/$multiarch/osfload" "$root/usr/bin/osfperf"
strip "$root"/usr/bin/osfrun "$root"/usr/bin/osfstat
[ ! -e "$root/usr/bin/osfgw" ] || strip "$root/usr/bin/osfgw"
install -m 0644 packaging/deb/copyright "$root/usr/share/doc/osf/copyright"
sed "s/@VERSION@/$version/" packaging/deb/changelog | gzip -9n > "$root/usr/share/doc/osf/changelog.Debian.gz"
chmod 0644 "$root/usr/share/doc/osf/changelog.Debian.gz"
install -d "$root/usr/share/lintian/overrides"
sed "s/@MULTIARCH@/$multiarch/g" packaging/deb/lintian-overrides > "$root/usr/share/lintian/overrides/osf"; chmod 0644 "$root/usr/share/lintian/overrides/osf"
echo /etc/osf.conf > "$root/DEBIAN/conffiles"
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version-1/; s/@ARCH@/$arch/; s/@SIZE@/$size/" packaging/deb/control > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/"*
find "$root" -type d -exec chmod 0755 {} +
dpkg-deb --root-owner-group -Zgzip -z1 --build "$root" "$build/osf_${version}-1_${arch}.deb" >/dev/null
echo "$build/osf_${version}-1_${arch}.deb"
