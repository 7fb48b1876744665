#!/usr/bin/env bash
# Many sequences over a pool: three shoal-node processes in network namespaces (veth + bridge,
# tests/integration/netns), the coordinator (shoal-cli) in a fourth; the same prompt generated as
# 1 and as N concurrent sequences (continuous batching, one batch per stage in flight), with the
# planner's predicted throughput for each. Prints one JSON object. Needs root.
#
# Usage: bench/pool_serve.sh [BUILD_DIR] [N (default 8)] [tokens per reply (default 64)]
#
# Each node's memory is capped so that the plan needs all three (--max-device-memory-mb, the
# smallest cap the planner accepts over three nodes for N sequences). The nodes compute with one
# thread each; on a machine with fewer cores than nodes they share cores, which the figures show.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${1:-$root/build}"
parallel="${2:-8}"
tokens="${3:-64}"
node="$build/app/node/shoal-node"
cli="$build/app/cli/shoal-cli"
[ -x "$node" ] && [ -x "$cli" ] || { echo "build shoal-node and shoal-cli first" >&2; exit 2; }
model="${SHOAL_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"

source "$here/pool_nodes.sh"
pool_bench_hosts pool_serve 4
pool_nodes_start "$work" "$node" "$model" 7000

pool() { netns_exec h4 "$cli" pool "$@" --nodes "$nodes" --config-dir "$work/cli" --ctx 512; }
for _ in $(seq 100); do pool status --json >/dev/null 2>&1 && break; sleep 0.2; done

# The smallest per-device cap (in MB, from a third of the model's size up: the KV caches of N
# sequences may need more than the model) with which three nodes hold it.
size_mb=$(($(stat -L -c %s "$model") / 1000000))
cap=""
for pct in 34 36 38 40 42 45 50 55 60 70 80 90 100 120 140 160; do
  mb=$((size_mb * pct / 100 + 20))
  stages="$(pool plan --parallel "$parallel" --max-device-memory-mb "$mb" 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("deploy") or []))' || echo 0)"
  if [ "$stages" = 3 ]; then cap="$mb"; break; fi
done
[ -n "$cap" ] || { echo "pool_serve: no cap gives a three-stage plan" >&2; exit 1; }

# Both on the deployment planned for N sequences: one stream, then N at once.
run() {  # run K: the JSON of `pool generate --parallel N --replies K`
  pool generate --parallel "$parallel" --replies "$1" --max-device-memory-mb "$cap" \
    -p "Once upon a time, in a small village by the sea," -n "$tokens" --ignore-eos --temp 0 \
    --json
}
one="$(run 1)"
many="$(run "$parallel")"
python3 - "$one" "$many" "$parallel" "$cap" "$(nproc)" <<'EOF'
import json, sys
one, many = json.loads(sys.argv[1]), json.loads(sys.argv[2])
n, cap, cores = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
single = one["aggregate_tokens_per_s"]
out = {
    "nodes": 3, "cores": cores, "node_threads": 1, "max_device_memory_mb": cap,
    "single_stream": {"tokens_per_s": single, "wall_s": one["wall_s"],
                      "predicted_tokens_per_s": one["predicted_tokens_per_s"],
                      "stages": len(one["stages"])},
    "concurrent": {"sequences": n, "aggregate_tokens_per_s": many["aggregate_tokens_per_s"],
                   "predicted_tokens_per_s": many["predicted_tokens_per_s"],
                   "stages": len(many["stages"]), "wall_s": many["wall_s"]},
}
out["aggregate_over_single"] = many["aggregate_tokens_per_s"] / single
out["measured_over_predicted"] = {
    "single": single / one["predicted_tokens_per_s"],
    "concurrent": many["aggregate_tokens_per_s"] / many["predicted_tokens_per_s"]}
print(json.dumps(out, indent=2))
EOF
