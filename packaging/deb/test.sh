#!/usr/bin/env bash
# Builds the Debian package, installs it on this machine with dpkg -i, and checks what it
# installed: `weir check` on the default config (/etc/weir/weir.yaml, binding its addresses),
# the unit with `systemd-analyze verify` when systemd is there, the conffiles, then removes
# and purges it. Needs root. Usage: bash packaging/deb/test.sh  (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
deb=$(bash packaging/deb/build.sh | tail -1)
echo "== $deb: $(stat -c %s "$deb") bytes"
dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p'
dpkg -i "$deb"
trap 'dpkg --purge weir >/dev/null 2>&1 || true' EXIT
test "$(command -v weir)" = /usr/bin/weir
echo "== weir check (default config)"
weir check
weir check --print | grep -q 'path: /hello'
test -f /etc/weir/www/index.html
test -f /lib/systemd/system/weir.service
grep -q '^ExecStart=/usr/bin/weir run -c /etc/weir/weir.yaml' /lib/systemd/system/weir.service
if command -v systemd-analyze >/dev/null 2>&1; then
  systemd-analyze verify /lib/systemd/system/weir.service
fi
dpkg-query -W -f='${Conffiles}\n' weir | grep -q /etc/weir/weir.yaml
echo "== serving the packaged config"
WEIR_LISTEN=127.0.0.1:0 timeout 10 weir run -c /etc/weir/weir.yaml 2>"${TMPDIR:-/tmp}/weir-deb.log" &
pid=$!
for _ in $(seq 50); do grep -q "serving http" "${TMPDIR:-/tmp}/weir-deb.log" && break; sleep 0.1; done
url=$(grep -o 'http://[^ ]*' "${TMPDIR:-/tmp}/weir-deb.log" | head -1)
python3 -c "import urllib.request,sys; b=urllib.request.urlopen(sys.argv[1]+'hello').read(); assert b==b'Hello, World\n', b" "$url"
kill -TERM $pid; wait $pid || true
dpkg -r weir >/dev/null
test ! -e /usr/bin/weir
test -f /etc/weir/weir.yaml   # conffiles stay until purge
dpkg --purge weir >/dev/null
test ! -e /etc/weir/weir.yaml
echo "ok: installed, checked, served, removed and purged"
