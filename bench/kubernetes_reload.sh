#!/usr/bin/env bash
# providers.kubernetes under a burst of changes (issue 56 §1): for 80, 500 and 2,000 HTTPRoutes,
# 100 changes sent as fast as the API server takes them while `weir bench -c 20` loads one
# route; the rebuilds weir did, its CPU per rebuild, and the load's failed requests
# (bench/tools/kube_reload.py starts etcd and the test kube-apiserver, which `.ci/run` installs).
# Usage: bench/kubernetes_reload.sh [COUNTS...]   (results in bench/results/kubernetes-reload-<date>.md)
source "$(dirname "$0")/lib.sh"
build_weir
raise_nofile
COUNTS=("${@:-80 500 2000}")
OUT="$ROOT/bench/results/kubernetes-reload-$(date -u +%Y%m%d-%H%M).md"
# shellcheck disable=SC2068
table=$(SUT_CORE=$SUT_CORE LOAD_CORE=$LOAD_CORE python3 "$ROOT/bench/tools/kube_reload.py" "$WEIR" ${COUNTS[@]})
{
  echo "# providers.kubernetes: rebuilds for a burst of ${CHANGES:-100} HTTPRoute changes"
  echo
  machine_info
  echo "- kube-apiserver: $(kube-apiserver --version 2>/dev/null), etcd $(etcd --version 2>/dev/null | head -1 | awk '{print $3}')"
  echo "- command: \`bench/kubernetes_reload.sh ${COUNTS[*]}\`; weir (1 worker, debounce 200 ms) on core $SUT_CORE; the origin (a weir) and \`weir bench -c 20 -d 30s\` on core $LOAD_CORE"
  echo
  echo "$table"
} > "$OUT"
cat "$OUT"
log "wrote $OUT"
