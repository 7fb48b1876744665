#!/usr/bin/env bash
# Per-hop overhead of remote stages, on loopback and (as root) over veth links between network
# namespaces (tests/integration/netns), as one JSON object: {"loopback": {...}, "veth": {...}}.
# Usage: bench/hop_overhead/run.sh [BUILD_DIR] [extra shoal-hop-overhead flags, e.g. --tokens 64]
# Each part is shoal-hop-overhead's JSON (see hop_overhead.cpp); "veth" is null without root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build}"
shift || true
node="$build/app/node/shoal-node"
bench="$build/bench/hop_overhead/shoal-hop-overhead"
[ -x "$node" ] && [ -x "$bench" ] || { echo "build shoal-node and shoal-hop-overhead first" >&2; exit 2; }

loopback="$("$bench" --node-exe "$node" "$@")"

veth=null
source "$root/tests/integration/netns/netns.sh"
if netns_unavailable_reason >/dev/null; then
  work="$(mktemp -d)"
  netns_setup 4
  trap 'netns_teardown; rm -rf "$work"' EXIT
  mkdir -p "$work/models"
  model="${SHOAL_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
  ln -s "$model" "$work/models/model.gguf"
  coordinator="$("$node" --print-device-id --config-dir "$work/coordinator")"
  args=(--model "$model" --identity-dir "$work/coordinator")
  # The nodes compute on the last CPU, as shoal-hop-overhead pins the nodes it starts (the
  # coordinator pins itself to the first).
  pin=()
  if [ "$(nproc)" -ge 2 ]; then pin=(taskset -c "$(($(nproc) - 1))"); fi
  for h in 1 2 3; do
    id="$("$node" --print-device-id --config-dir "$work/node$h")"
    netns_exec "h$h" "${pin[@]}" "$node" --config-dir "$work/node$h" --port 7000 --no-discovery \
      --threads 1 --models-dir "$work/models" --trust "$coordinator" >"$work/node$h.out" 2>/dev/null &
    args+=(--connect "$(netns_ip "h$h"):7000" --trust "$id")
  done
  for h in 1 2 3; do
    for _ in $(seq 100); do grep -q " port " "$work/node$h.out" 2>/dev/null && break; sleep 0.1; done
  done
  veth="$(netns_exec h4 "$bench" "${args[@]}" "$@")"
fi
printf '{"loopback": %s, "veth": %s}\n' "$loopback" "$veth"
