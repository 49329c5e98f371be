#!/usr/bin/env bash
# Builds the Debian package: target/debian/weir_<version>_<arch>.deb, with
#   /usr/bin/weir                      the dist profile (stripped, no debug info)
#   /lib/systemd/system/weir.service   deploy/weir.service, with /usr/bin paths
#   /etc/weir/weir.yaml, /etc/weir/www examples/hello.yaml and examples/www (conffiles)
#   /usr/share/doc/weir                README.md, ARCHITECTURE.md and docs/ (the README's links)
# dpkg-deb does the packing (cargo-deb would need another tool installed; this is the same
# layout in a page of shell). Usage: bash packaging/deb/build.sh  (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="weir"))')
arch=$(dpkg --print-architecture)
cargo build --profile dist --locked -p weir
root=target/debian/weir_${version}_${arch}
rm -rf "$root"
install -D -m 755 target/dist/weir "$root/usr/bin/weir"
install -d "$root/lib/systemd/system" "$root/etc/weir" "$root/usr/share/doc/weir" "$root/DEBIAN"
sed 's|/usr/local/bin/weir|/usr/bin/weir|g' deploy/weir.service > "$root/lib/systemd/system/weir.service"
install -m 644 examples/hello.yaml "$root/etc/weir/weir.yaml"
cp -r examples/www "$root/etc/weir/www"
install -m 644 README.md ARCHITECTURE.md "$root/usr/share/doc/weir/"
install -d "$root/usr/share/doc/weir/docs"
install -m 644 docs/*.md "$root/usr/share/doc/weir/docs/"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: weir
Version: ${version}
Architecture: ${arch}
Maintainer: weir developers <weir@localhost>
Installed-Size: ${size}
Depends: libc6 (>= 2.34)
Section: httpd
Priority: optional
Homepage: https://github.com/weir-proxy/weir
Description: HTTP accelerator: reverse proxy, HTTP cache, API gateway and DoS shield
 weir serves HTTP/1.1 and HTTP/2 over TLS, proxies to upstream pools, caches per
 RFC 9111, runs gateway filter pipelines and limits abusive clients, in one
 binary with its own load generator (weir bench).
CONTROL
find "$root/etc" -type f | sed "s|^$root||" | sort > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
# The unit is installed, not started: look at /etc/weir/weir.yaml, then
#   systemctl enable --now weir
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
POSTINST
cat > "$root/DEBIAN/prerm" <<'PRERM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop weir.service >/dev/null 2>&1 || true
fi
PRERM
cat > "$root/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
POSTRM
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
dpkg-deb --build --root-owner-group "$root" >/dev/null
echo "$root.deb"
