#!/usr/bin/env bash
# Runs franz-go's own integration tests (pkg/kgo, from the module cache)
# against a local three-node raftlog cluster. KGO_RUN picks them (a go
# test -run pattern; default TestGroupETL and TestAddRemovePartitions).
# When a test fails, the cluster's output is printed (its last lines) and
# its data directory, with the nodes' log, is kept.
# Usage: scripts/kgo-tests.sh [extra go test flags]
set -euo pipefail
cd "$(dirname "$0")/.."
port=${KGO_PORT:-24092} # below the ephemeral range, where no client socket takes it
bin=$(mktemp -d)/raftlog
go build -o "$bin" ./cmd/raftlog
out=$(mktemp)
dir=$(mktemp -d)
"$bin" dev --kafka-port "$port" --dir "$dir" >"$out" 2>&1 &
dev=$!
failed=
stop() {
  kill -TERM "$dev" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$dev" 2>/dev/null || break; sleep 1; done
  kill -KILL "$dev" 2>/dev/null || true
  if [ -z "$failed" ]; then rm -rf "$dir" "$out" "$(dirname "$bin")"; fi
}
trap stop EXIT
for _ in $(seq 1 120); do
  grep -q "cluster is up" "$out" && break
  kill -0 "$dev" 2>/dev/null || { cat "$out"; exit 1; }
  sleep 1
done
grep -q "cluster is up" "$out" || { echo "the cluster did not come up"; cat "$out"; exit 1; }
seeds="127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))"
KGO_SEEDS=$seeds KGO_TEST_RF=3 KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-20000} KGO_LOG_LEVEL=none \
  go test github.com/twmb/franz-go/pkg/kgo -count=1 -timeout 10m \
  -run "${KGO_RUN:-^(TestGroupETL|TestAddRemovePartitions)\$}" "$@" || {
  rc=$?
  failed=1
  echo "== the cluster's output ($out), last 200 lines; the nodes' log, kept: $dir/raftlog.log"
  tail -n 200 "$out"
  exit $rc
}
