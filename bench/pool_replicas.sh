#!/usr/bin/env bash
# Replicas over a pool: four shoal-node processes in network namespaces (veth + bridge,
# tests/integration/netns), the coordinator (`shoal-cli pool serve`) in a fifth, serving the
# OpenAI API; C streaming clients at once (bench/serve.py's load: seeded prompts, ignore_eos)
# against the pool deployed as one pipeline (--replicas 1, --parallel C) and as two replicas
# (--replicas 2, --parallel C/2 each: the same sequences at once), alternated R rounds. Prints
# one JSON object: per configuration the median aggregate tokens/s, the planner's predicted
# throughput, how the requests spread over the replicas (GET /health), and the ratio of two
# replicas to one. Needs root.
#
# Usage: bench/pool_replicas.sh [BUILD_DIR] [C (default 8)] [R (default 3)] [tokens (default 64)]
#
# Each node's memory is capped at the model's size: with the KV caches and the tied embedding on
# both ends no node holds the model alone, so a replica takes two nodes or more. The nodes
# compute with one thread each; on a machine with fewer cores than nodes they share cores, so
# the planner (which gives every node its own) over-predicts, and more replicas cannot add
# compute that the machine does not have.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${1:-$root/build}"
clients="${2:-8}"
rounds="${3:-3}"
tokens="${4:-64}"
node="$build/app/node/shoal-node"
cli="$build/app/cli/shoal-cli"
[ -x "$node" ] && [ -x "$cli" ] || { echo "build shoal-node and shoal-cli first" >&2; exit 2; }
model="${SHOAL_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[ $((clients % 2)) = 0 ] || { echo "pool_replicas: C must be even" >&2; exit 2; }

source "$here/pool_nodes.sh"
pool_bench_hosts pool_replicas 5
pool_nodes_start "$work" "$node" "$model" 7000 4
cap=$(($(stat -L -c %s "$model") / 1000000))
for _ in $(seq 100); do
  netns_exec h5 "$cli" pool status --json --nodes "$nodes" --config-dir "$work/cli" >/dev/null 2>&1 &&
    break
  sleep 0.2
done

# serve REPLICAS PARALLEL PORT: starts `pool serve` in h5 and waits for its API line.
serve() {
  netns_exec h5 "$cli" pool serve --nodes "$nodes" --config-dir "$work/cli" -m "$model" \
    --ctx 512 --max-device-memory-mb "$cap" --replicas "$1" --parallel "$2" --api-port "$3" \
    --draft-model none >"$work/serve-$1-$3.out" 2>&1 &
  serving=$!
  pids+=("$serving")
  for _ in $(seq 600); do
    grep -q "API on http" "$work/serve-$1-$3.out" 2>/dev/null && return 0
    kill -0 "$serving" 2>/dev/null || break
    sleep 0.2
  done
  cat "$work/serve-$1-$3.out" >&2
  return 1
}

results="$work/results.jsonl"
port=8100
for round in $(seq "$rounds"); do
  # Alternated: one pipeline first in odd rounds, two replicas first in even ones.
  order="1 2"
  [ $((round % 2)) = 0 ] && order="2 1"
  for replicas in $order; do
    port=$((port + 1))
    serve "$replicas" $((clients / replicas)) "$port"
    netns_exec h5 python3 - "$port" "$clients" "$tokens" "$round" "$replicas" \
      "$work/serve-$replicas-$port.out" "$here" >>"$results" <<'PY'
import http.client, json, re, sys, types
sys.path.insert(0, sys.argv[7])
from serve import draw_requests, run_level  # noqa: E402
port, clients, tokens, round_, replicas, log = (int(sys.argv[1]), int(sys.argv[2]),
                                                int(sys.argv[3]), int(sys.argv[4]),
                                                int(sys.argv[5]), sys.argv[6])
a = types.SimpleNamespace(prompt_min=20, prompt_max=60, gen_min=tokens, gen_max=tokens)
requests = draw_requests(round_, clients, 2, a)
level = run_level(types.SimpleNamespace(name=f"replicas {replicas}", port=port), requests)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("GET", "/health")
health = json.loads(c.getresponse().read())
with open(log) as f:
    line = next(l for l in f if "API on http" in l)
predicted = sum(float(x) for x in re.findall(r"predicted ([0-9.]+) tokens/s", line))
spread = [r["completed"] for r in health.get("replicas", [])] or [health["queue"]["completed"]]
print(json.dumps({"round": round_, "replicas": replicas, "predicted_tokens_per_s": predicted,
                  "completed_per_replica": spread, "pipeline": line.strip(), **level}))
PY
    kill "$serving"
    wait "$serving" 2>/dev/null || true
  done
done

python3 - "$results" "$clients" "$cap" "$(nproc)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
clients, cap, cores = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
out = {"nodes": 4, "cores": cores, "node_threads": 1, "clients": clients,
       "max_device_memory_mb": cap}
for k in (1, 2):
    mine = [r for r in rows if r["replicas"] == k]
    out[f"replicas_{k}"] = {
        "aggregate_tokens_per_s": statistics.median(r["aggregate_tokens_per_s"] for r in mine),
        "runs": [round(r["aggregate_tokens_per_s"], 1) for r in mine],
        "predicted_tokens_per_s": mine[-1]["predicted_tokens_per_s"],
        "completed_per_replica": mine[-1]["completed_per_replica"],
        "ttft_s_p50": statistics.median(r["ttft_s_p50"] for r in mine),
        "pipeline": mine[-1]["pipeline"]}
    out[f"replicas_{k}"]["measured_over_predicted"] = (
        out[f"replicas_{k}"]["aggregate_tokens_per_s"] / out[f"replicas_{k}"]["predicted_tokens_per_s"])
pairs = {}
for r in rows:
    pairs.setdefault(r["round"], {})[r["replicas"]] = r["aggregate_tokens_per_s"]
out["two_over_one"] = statistics.median(p[2] / p[1] for p in pairs.values())
print(json.dumps(out, indent=2))
PY
