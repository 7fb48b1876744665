#!/usr/bin/env bash
# Every figure of issue 3 (CPU backend performance) in one JSON file:
#   - DRAM read bandwidth (bench/membw, same thread count);
#   - Shoal vs llama.cpp (bench/compare_llamacpp.py: pp, tg, peak RSS, startup, roofline) on
#     SmolLM2-135M Q4_1 and on the synthetic Llama-3.2-1B-shaped model in Q4_0 and Q8_0;
#   - each target of the issue, met or not.
#
#   bench/issue3_figures.sh [--build DIR] [--threads N] [--runs R] [--out FILE] [--force]
#                           [-- EXTRA compare_llamacpp.py ARGS, e.g. -p 16 -n 8 for a dry run]
#
# Timings are worthless on a loaded machine: it refuses to start when the 1-minute load average
# is 1.5 or more (--force overrides) and records the load before and after in the JSON.
# Takes about 15 minutes with 2 threads and 5 runs. Builds shoal-cli, shoal-synth-model and
# shoal_membw in DIR first (a no-op when they are up to date); llama.cpp comes from
# tools/llamacpp/build_llama_bench.sh.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
threads=2
runs=5
out=""
force=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --build) build="$(realpath "$2")"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --force) force=1; shift ;;
        --) shift; break ;;
        *) echo "issue3_figures: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -n "$out" ]] || out="$build/issue3_figures.json"

# Built before the load check: a rebuild right before the timings would disturb them.
cmake --build "$build" --target shoal-cli shoal-synth-model shoal_membw >&2

load1() { cut -d' ' -f1 /proc/loadavg; }
if [[ $force -eq 0 ]] && awk -v l="$(load1)" 'BEGIN { exit !(l >= 1.5) }'; then
    echo "issue3_figures: 1-minute load is $(load1) (>= 1.5): figures would be worthless;" \
         "wait for a quiet machine or pass --force" >&2
    exit 1
fi
load_before="$(cat /proc/loadavg)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The bandwidth is measured before and after the comparisons and the higher median is the
# roofline: disturbance only ever lowers it, and a low roofline would flatter the decode.
membw() {
    echo "issue3_figures: DRAM bandwidth ($threads threads)" >&2
    "$build/bench/membw/shoal_membw" --threads "$threads" > "$1"
}
best_gibs() {
    python3 -c 'import json,sys; print(max(json.load(open(f))["gib_per_s_median"] for f in sys.argv[1:]))' "$@"
}
membw "$tmp/membw_before.json"
gibs="$(best_gibs "$tmp/membw_before.json")"

common=(--build "$build" --threads "$threads" --runs "$runs" --bandwidth-gibs "$gibs" "$@")
echo "issue3_figures: SmolLM2-135M Q4_1" >&2
python3 "$root/bench/compare_llamacpp.py" "${common[@]}" > "$tmp/smollm2.json"
for t in q4_0 q8_0; do
    echo "issue3_figures: synthetic 1B $t" >&2
    python3 "$root/bench/compare_llamacpp.py" "${common[@]}" --synthetic-1b "$t" \
        > "$tmp/synth_$t.json"
done
membw "$tmp/membw_after.json"
gibs_final="$(best_gibs "$tmp/membw_before.json" "$tmp/membw_after.json")"
load_after="$(cat /proc/loadavg)"

python3 - "$tmp" "$load_before" "$load_after" "$gibs_final" > "$out" <<'PY'
import json, sys
from pathlib import Path
tmp, before, after, gibs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
membw = {"before": json.loads((tmp / "membw_before.json").read_text()),
         "after": json.loads((tmp / "membw_after.json").read_text()),
         "roofline_gib_per_s": gibs}
runs = {name: json.loads((tmp / f"{name}.json").read_text())
        for name in ("smollm2", "synth_q4_0", "synth_q8_0")}
# Recompute each roofline against the higher of the two bandwidth medians.
for r in runs.values():
    roof = r["roofline"]
    roof["dram_read_gib_per_s"] = gibs
    roof["bandwidth_source"] = "shoal_membw, higher median of before/after"
    roof["fraction_of_dram_bandwidth"] = {
        who: roof["decode_bytes_per_token"] * tg / (gibs * (1 << 30))
        for who, tg in r["median"]["tg"].items()}

def ratio(name, key):
    return runs[name]["median_ratio_shoal_over_llamacpp"][key]

def roofline(name):
    return runs[name]["roofline"]["fraction_of_dram_bandwidth"]["shoal"]

# (target, value, passes) as the issue states them.
targets = [
    ("SmolLM2 Q4_1 tg >= 1.2x llama.cpp", ratio("smollm2", "tg"), ratio("smollm2", "tg") >= 1.2),
    ("SmolLM2 Q4_1 pp >= 1.0x llama.cpp", ratio("smollm2", "pp"), ratio("smollm2", "pp") >= 1.0),
]
for name in ("smollm2", "synth_q4_0", "synth_q8_0"):
    targets.append((f"{name} peak RSS <= llama.cpp's", ratio(name, "rss"), ratio(name, "rss") <= 1.0))
for name in ("synth_q4_0", "synth_q8_0"):
    targets.append((f"{name} tg >= 1.0x llama.cpp", ratio(name, "tg"), ratio(name, "tg") >= 1.0))
    targets.append((f"{name} decode >= 80% of DRAM read bandwidth", roofline(name),
                    roofline(name) >= 0.8))
print(json.dumps({
    "loadavg_before": before, "loadavg_after": after,
    "membw": membw,
    "targets": [{"target": t, "value": round(v, 4), "met": ok} for t, v, ok in targets],
    "runs": runs,
}, indent=2))
PY
echo "issue3_figures: wrote $out" >&2
python3 -c 'import json,sys
for t in json.load(open(sys.argv[1]))["targets"]:
    print(("met     " if t["met"] else "NOT MET ") + t["target"] + ": " + str(t["value"]))' "$out" >&2
