#!/usr/bin/env bash
# Runs every seed benchmark in turn, then the cache churn memory bench (pass --quick for the
# short versions, ≈ 2 minutes each).
# Each script installs what it needs, pins servers to core 0 and the load to core 1, stops what
# it started, and writes its results under bench/results/.
set -uo pipefail
cd "$(dirname "$0")"
status=0
for s in core.sh seed000_cache.sh seed001_hello.sh seed002_close.sh seed003_gateway.sh seed004_table.sh cache_churn.sh; do
  echo "=== $s $*"
  if ! ./"$s" "$@"; then
    echo "=== $s failed" >&2
    status=1
  fi
done
exit $status
