#!/bin/sh
# weir's DNS-01 hook for DNS servers that take RFC 2136 dynamic updates (bind9, Knot, PowerDNS,
# Windows DNS) signed with a TSIG key, through `nsupdate` (Debian: dnsutils). weir's own client,
# `dns: { rfc2136: { server, key_file } }` (docs/config.md), is the first choice: it needs no
# nsupdate on the host. This hook stays for setups built on it:
#   tls: { acme: { names: ["*.example.com"], challenge: dns-01,
#                  dns: { exec: [/path/to/dns-nsupdate.sh], propagation: 2s } } }
# weir runs it as `dns-nsupdate.sh present|cleanup FQDN VALUE`.
# Environment (set where weir runs):
#   WEIR_NSUPDATE_SERVER  the primary server: `host` or `host port` (e.g. `127.0.0.1 5353`)
#   WEIR_NSUPDATE_KEY     the TSIG key file (`tsig-keygen -a hmac-sha256 NAME > key.conf`)
# tests/acme.rs runs it against bind9 on loopback with pebble as the CA.
set -eu
action=$1 fqdn=$2 value=$3
case "$action" in
  present) op="update add $fqdn 60 IN TXT \"$value\"" ;;
  cleanup) op="update delete $fqdn TXT \"$value\"" ;;
  *) echo "dns-nsupdate.sh: unknown action $action" >&2; exit 2 ;;
esac
nsupdate -k "$WEIR_NSUPDATE_KEY" <<UPDATE
server $WEIR_NSUPDATE_SERVER
$op
send
UPDATE
