#!/usr/bin/env bash
# One conversation over a pool behind an emulated home LAN: three shoal-node processes in network
# namespaces (veth + bridge, tests/integration/netns), each behind shoal_link_emulator (delay,
# jitter, rate, loss; bench/link_emulator — this kernel has no netem qdisc), the coordinator
# (shoal-cli) in a fourth. Per link profile it measures, as JSON:
#   - rtt_ms: the round trip the coordinator measured to each node through the emulator;
#   - decode_tokens_per_s: one greedy stream, 128 tokens, no speculation, and the planner's
#     prediction for it (predicted_tokens_per_s, predicted_over_measured);
#   - uncapped: the same stream on the planner's own choice without a memory cap (one node for a
#     model that fits one), and sampled_scheduler_tokens_per_s: that at temperature 0.7 through
#     the scheduler (the path of the pool API, `shoal-cli pool serve`);
#   - ttft_s: time to the first token for prompts of about 32, 512 and 2048 tokens, and the
#     planner's prediction for each (predicted_ttft_s, predicted_ttft_over_measured);
#   - relay: decode and the 2048-token TTFT again with every hop relayed through the coordinator
#     (`--relay`, the pool before direct forwarding), and direct ÷ relay of each (median of the
#     pairs);
#   - ring: whether the last node was linked back to the first (decode then goes in bursts round
#     the ring, lan/pool/linked_stages.h), decode again without it (`--no-ring`: every token back
#     to the coordinator), and ring ÷ no ring (median of the pairs);
#   - speculation: the code-editing workload (bench/code_edit_prompt.py, 256 tokens) without and
#     with prompt-lookup drafts: tok/s of each, their ratio, the acceptance, whether the texts
#     are identical;
#   - draft_model (only with SHOAL_DRAFT_MODEL=PATH): a story prompt (128 tokens) without and
#     with that draft model proposing tokens on the coordinator (`--draft-model`): tok/s of each,
#     their ratio, the draft model's acceptance, whether the texts are identical;
# plus, once, compute_only_tokens_per_s and compute_only_ttft_2048_s: `shoal-cli generate` on one
# machine with one thread (the nodes' thread count), i.e. the model's whole compute with no
# network — the bound a pipeline of these nodes approaches in decode, and what pipelined prefill
# divides (at most by the number of nodes, and by no more than the cores the machine has). Each figure is the median of R runs, profiles alternated per run.
# Needs root.
#
# Usage: bench/pool_latency.sh [BUILD_DIR] [R (default 3)] [PROFILES (default
#   none,1gbe,2.5gbe,wifi,laptop-wifi; the last: nodes on 1 GbE, the coordinator on Wi-Fi)]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${1:-$root/build}"
reps="${2:-3}"
profiles="${3:-none,1gbe,2.5gbe,wifi,laptop-wifi}"
node="$build/app/node/shoal-node"
cli="$build/app/cli/shoal-cli"
emulator="$build/bench/link_emulator/shoal_link_emulator"
for b in "$node" "$cli" "$emulator"; do
  [ -x "$b" ] || { echo "pool_latency: build $(basename "$b") first" >&2; exit 2; }
done
model="${SHOAL_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
ctx=4096

source "$here/pool_nodes.sh"
pool_bench_hosts pool_latency 4
pool_nodes_start "$work" "$node" "$model" 7100

use_profile() {
  for p in "${emulators[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${emulators[@]}"; do wait "$p" 2>/dev/null || true; done
  emulators=()
  pool_links_start "$work" "$emulator" "$1" 7100
}

pool() { netns_exec h4 "$cli" pool "$@" --nodes "$nodes" --config-dir "$work/cli" --ctx "$ctx"; }
use_profile none
for _ in $(seq 100); do pool status --json >/dev/null 2>&1 && break; sleep 0.2; done

# The smallest per-device cap (MB) with which the plan needs all three nodes.
size_mb=$(($(stat -L -c %s "$model") / 1000000))
cap=""
for pct in 34 36 38 40 42 45 50 55 60 70; do
  mb=$((size_mb * pct / 100 + 40))
  stages="$(pool plan --max-device-memory-mb "$mb" 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("deploy") or []))' || echo 0)"
  if [ "$stages" = 3 ]; then cap="$mb"; break; fi
done
[ -n "$cap" ] || { echo "pool_latency: no cap gives a three-stage plan" >&2; exit 1; }

words() { python3 -c "import sys; print(' '.join(['the quiet harbour light']*(int(sys.argv[1])//4)))" "$1"; }
python3 "$here/code_edit_prompt.py" >"$work/code_edit.txt"
# The draft-model workload: a chat request for new prose (nothing to quote, so prompt lookup
# rarely drafts and the draft model's proposals are what is measured).
story="$(printf '<|im_start|>user\nWrite a short story about a lighthouse keeper.<|im_end|>\n<|im_start|>assistant\n')"
gen() { pool generate --max-device-memory-mb "$cap" --temp 0 --json "$@"; }

results="$work/results.jsonl"
compute="$("$cli" generate -p "Once upon a time, in a small village by the sea," -n 128 --ignore-eos \
  --temp 0 --threads 1 --ctx "$ctx" --draft-max 0 -v 2>&1 >/dev/null |
  sed -n 's/.* \([0-9.]*\) tok\/s.*/\1/p')"
compute_ttft="$("$cli" generate -p "$(words 2048)" -n 1 --temp 0 --threads 1 --ctx "$ctx" \
  --draft-max 0 -v 2>&1 >/dev/null | sed -n 's/.*tokens in \([0-9.]*\) s.*/\1/p')"
for rep in $(seq "$reps"); do
  for prof in ${profiles//,/ }; do
    use_profile "$prof"
    rtt="$(pool status 2>/dev/null | sed -n 's/^link to .*: rtt \([0-9.]*\) ms.*/\1/p' | paste -sd, -)"
    decode="$(gen -p "Once upon a time, in a small village by the sea," -n 128 --ignore-eos --draft-max 0)"
    # The planner's own choice, no memory cap: a model that fits one node should stay on one
    # node whenever the links would make it slower ("adding a machine never makes it slower").
    free="$(pool generate --temp 0 --json -p "Once upon a time, in a small village by the sea," \
      -n 128 --ignore-eos --draft-max 0)"
    # The same through the scheduler at temperature 0.7: the pool API's path.
    sfree="$(pool generate --parallel 1 --replies 1 --temp 0.7 --seed 5 --json \
      -p "Once upon a time, in a small village by the sea," -n 128 --ignore-eos --draft-max 0)"
    t32="$(gen -p "$(words 32)" -n 1 --draft-max 0)"
    t512="$(gen -p "$(words 512)" -n 1 --draft-max 0)"
    t2048="$(gen -p "$(words 2048)" -n 1 --draft-max 0)"
    rdecode="$(gen -p "Once upon a time, in a small village by the sea," -n 128 --ignore-eos \
      --draft-max 0 --relay)"
    nring="$(gen -p "Once upon a time, in a small village by the sea," -n 128 --ignore-eos \
      --draft-max 0 --no-ring)"
    r2048="$(gen -p "$(words 2048)" -n 1 --draft-max 0 --relay)"
    plain="$(gen -p "$(cat "$work/code_edit.txt")" -n 256 --draft-max 0)"
    spec="$(gen -p "$(cat "$work/code_edit.txt")" -n 256 --draft-max 8 --draft-model none)"
    dplain='{}' dspec='{}'
    if [ -n "${SHOAL_DRAFT_MODEL:-}" ]; then
      dplain="$(gen -p "$story" -n 128 --ignore-eos --draft-max 8 --draft-model none)"
      dspec="$(gen -p "$story" -n 128 --ignore-eos --draft-max 8 --draft-model "$SHOAL_DRAFT_MODEL")"
    fi
    python3 - "$prof" "$rtt" "$decode" "$t32" "$t512" "$t2048" "$plain" "$spec" "$free" \
      "$rdecode" "$r2048" "$dplain" "$dspec" "$sfree" "$nring" >>"$results" <<'PY'
import json, sys
prof, rtt = sys.argv[1], sys.argv[2]
(decode, t32, t512, t2048, plain, spec, free, rdecode, r2048, dplain, dspec,
 sfree, nring) = (json.loads(a) for a in sys.argv[3:])
draft = {}
if dspec:
    draft = {"plain_tokens_per_s": dplain["tokens_per_s"], "tokens_per_s": dspec["tokens_per_s"],
             "drafted": dspec["model_drafted_tokens"], "accepted": dspec["model_accepted_tokens"],
             "identical": dplain["text"] == dspec["text"]}
print(json.dumps({
    "draft_model": draft,
    "direct_hops": all(h["direct"] for h in decode["hops"]),
    "predicted_tokens_per_s": decode["predicted_tokens_per_s"],
    "relay_decode_tokens_per_s": rdecode["tokens_per_s"],
    "relay_ttft_2048_s": r2048["prefill_s"],
    "ring": decode["ring"]["direct"],
    "no_ring_decode_tokens_per_s": nring["tokens_per_s"],
    "ring_text_identical": nring["text"] == decode["text"],
    "profile": prof,
    "rtt_ms": [float(x) for x in rtt.split(",") if x],
    "decode_tokens_per_s": decode["tokens_per_s"],
    "ttft_s": {str(t["prompt_tokens"]): t["prefill_s"] for t in (t32, t512, t2048)},
    "predicted_ttft_s": {str(t["prompt_tokens"]): t["predicted_ttft_s"] for t in (t32, t512, t2048)},
    "plain_tokens_per_s": plain["tokens_per_s"],
    "speculative_tokens_per_s": spec["tokens_per_s"],
    "drafted": spec["drafted_tokens"], "accepted": spec["accepted_tokens"],
    "identical": plain["text"] == spec["text"],
    "uncapped_stages": len(free["stages"]),
    "uncapped_tokens_per_s": free["tokens_per_s"],
    "uncapped_ahead_tokens": free.get("ahead_tokens", 0),
    "uncapped_sampled_scheduler_tokens_per_s": sfree["aggregate_tokens_per_s"],
}))
PY
  done
done
cat "$work"/emulator*.out >&2
python3 - "$results" "$compute" "$cap" "$reps" "$(basename "$model" .gguf)" "$compute_ttft" \
  "$(basename "${SHOAL_DRAFT_MODEL:-none}" .gguf)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
compute, cap, reps = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
med = statistics.median
out = {"model": sys.argv[5], "nodes": 3, "node_threads": 1, "runs": reps,
       "max_device_memory_mb": cap, "compute_only_tokens_per_s": compute,
       "compute_only_ttft_2048_s": float(sys.argv[6]), "profiles": {}}
for prof in dict.fromkeys(r["profile"] for r in rows):
    rs = [r for r in rows if r["profile"] == prof]
    ratios = [r["speculative_tokens_per_s"] / r["plain_tokens_per_s"] for r in rs]
    decode = med(r["decode_tokens_per_s"] for r in rs)
    out["profiles"][prof] = {
        "rtt_ms_median": med([x for r in rs for x in r["rtt_ms"]] or [0]),
        "decode_tokens_per_s": decode,
        "decode_over_compute_only": decode / compute,
        "predicted_tokens_per_s": med(r["predicted_tokens_per_s"] for r in rs),
        "predicted_over_measured": med(r["predicted_tokens_per_s"] / r["decode_tokens_per_s"]
                                       for r in rs),
        "ttft_s": {k: med(r["ttft_s"][k] for r in rs) for k in rs[0]["ttft_s"]},
        "predicted_ttft_s": {k: med(r["predicted_ttft_s"][k] for r in rs)
                             for k in rs[0]["predicted_ttft_s"]},
        "predicted_ttft_over_measured": {
            k: med(r["predicted_ttft_s"][k] / r["ttft_s"][k] for r in rs) for k in rs[0]["ttft_s"]},
        "direct_hops": all(r["direct_hops"] for r in rs),
        "relay": {
            "decode_tokens_per_s": med(r["relay_decode_tokens_per_s"] for r in rs),
            "ttft_2048_s": med(r["relay_ttft_2048_s"] for r in rs),
            "decode_direct_over_relay": med(r["decode_tokens_per_s"] / r["relay_decode_tokens_per_s"]
                                            for r in rs),
            "ttft_2048_direct_over_relay": med(r["ttft_s"][max(r["ttft_s"], key=int)]
                                               / r["relay_ttft_2048_s"] for r in rs),
        },
        "ring": {
            "linked": all(r["ring"] for r in rs),
            "no_ring_decode_tokens_per_s": med(r["no_ring_decode_tokens_per_s"] for r in rs),
            "decode_ring_over_no_ring": med(r["decode_tokens_per_s"]
                                            / r["no_ring_decode_tokens_per_s"] for r in rs),
            "texts_identical": all(r["ring_text_identical"] for r in rs),
        },
        "uncapped": {"stages": sorted({r["uncapped_stages"] for r in rs}),
                     "decode_tokens_per_s": med(r["uncapped_tokens_per_s"] for r in rs),
                     "over_compute_only": med(r["uncapped_tokens_per_s"] for r in rs) / compute,
                     "ahead_tokens": med(r["uncapped_ahead_tokens"] for r in rs),
                     "sampled_scheduler_tokens_per_s":
                         med(r["uncapped_sampled_scheduler_tokens_per_s"] for r in rs)},
        "speculation": {
            "plain_tokens_per_s": med(r["plain_tokens_per_s"] for r in rs),
            "speculative_tokens_per_s": med(r["speculative_tokens_per_s"] for r in rs),
            "speedup_median_of_pairs": med(ratios),
            "acceptance": sum(r["accepted"] for r in rs) / max(1, sum(r["drafted"] for r in rs)),
            "texts_identical": all(r["identical"] for r in rs),
        },
    }
    ds = [r["draft_model"] for r in rs if r["draft_model"]]
    if ds:
        out["profiles"][prof]["draft_model"] = {
            "model": sys.argv[7],
            "plain_tokens_per_s": med(d["plain_tokens_per_s"] for d in ds),
            "tokens_per_s": med(d["tokens_per_s"] for d in ds),
            "speedup_median_of_pairs": med(d["tokens_per_s"] / d["plain_tokens_per_s"] for d in ds),
            "acceptance": sum(d["accepted"] for d in ds) / max(1, sum(d["drafted"] for d in ds)),
            "texts_identical": all(d["identical"] for d in ds),
        }
print(json.dumps(out, indent=2))
PY
