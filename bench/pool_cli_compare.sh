#!/usr/bin/env bash
# Two shoal-cli builds (a baseline and a candidate) on the same pool, alternated: three shoal-node
# processes in network namespaces behind emulated links (bench/link_emulator, profiles as in
# pool_latency.sh), each device capped so that the plan needs all three, and the coordinator in a
# fourth namespace running N concurrent generations (`pool generate --parallel N`, the
# scheduler). Prints one line per run: profile, which build, aggregate tok/s. Needs root.
#
# Usage: bench/pool_cli_compare.sh BASELINE_CLI CANDIDATE_CLI [PROFILE (1gbe)] [RUNS (3)]
#        [N (8)] [TEMPERATURE (0.7)]
# e.g. a baseline built from an earlier commit in a worktree (git worktree add; cmake --build
# --target shoal-cli shoal-cli-net) against build/app/cli/shoal-cli. The nodes are this tree's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="$root/build"
baseline="$1" candidate="$2" prof="${3:-1gbe}" runs="${4:-3}" parallel="${5:-8}" temp="${6:-0.7}"
node="$build/app/node/shoal-node"
emulator="$build/bench/link_emulator/shoal_link_emulator"
for b in "$node" "$emulator" "$baseline" "$candidate"; do
  [ -x "$b" ] || { echo "pool_cli_compare: $b is not built" >&2; exit 2; }
done
model="${SHOAL_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"

source "$here/pool_nodes.sh"
pool_bench_hosts pool_cli_compare 4
pool_nodes_start "$work" "$node" "$model" 7100
pool_links_start "$work" "$emulator" "$prof" 7100
pool() {
  local cli="$1"
  shift
  netns_exec h4 "$cli" pool "$@" --nodes "$nodes" --config-dir "$work/cli" --ctx 512
}
for _ in $(seq 100); do pool "$candidate" status --json >/dev/null 2>&1 && break; sleep 0.2; done
# The smallest per-device cap (MB) with which the plan for N sequences needs all three nodes.
size_mb=$(($(stat -L -c %s "$model") / 1000000))
cap=""
for pct in 34 36 38 40 42 45 50 55 60 70 80 90 100 120 140 160; do
  mb=$((size_mb * pct / 100 + 20))
  stages="$(pool "$candidate" plan --parallel "$parallel" --max-device-memory-mb "$mb" 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("deploy") or []))' || echo 0)"
  if [ "$stages" = 3 ]; then cap="$mb"; break; fi
done
[ -n "$cap" ] || { echo "pool_cli_compare: no cap gives a three-stage plan" >&2; exit 1; }
for _ in $(seq "$runs"); do
  for which in baseline candidate; do
    cli="$baseline"
    [ "$which" = candidate ] && cli="$candidate"
    out="$(pool "$cli" generate -m "$model" --parallel "$parallel" --max-device-memory-mb "$cap" \
      --temp "$temp" --seed 9 --draft-max 0 -p "Once upon a time, in a small village by the sea," \
      -n 64 --ignore-eos --json)"
    python3 -c 'import json,sys; d=json.loads(sys.argv[3]); print(sys.argv[1], sys.argv[2], round(d["aggregate_tokens_per_s"], 1))' \
      "$prof" "$which" "$out"
  done
done
