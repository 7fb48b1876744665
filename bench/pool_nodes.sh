#!/usr/bin/env bash
# Sourced by the pool benchmarks (pool_serve.sh, pool_latency.sh, pool_replicas.sh).
#
#   pool_bench_hosts NAME HOSTS
# sources tests/integration/netns/netns.sh (exits 2 with NAME and the reason where network
# namespaces are unavailable), builds HOSTS hosts, makes a scratch folder `work` and an empty
# `pids` array, and on exit kills those pids (and any in `emulators`), removes the hosts and the
# folder.
#
# Then: COUNT (default three) shoal-node processes
# on hosts h1..hCOUNT (port 7000, one thread each, no discovery, the model from a shared models
# folder), trusting a coordinator identity made in $work/cli, which trusts them in turn.
#
#   pool_nodes_start WORK NODE_BINARY MODEL ADDRESS_PORT [COUNT]
# (started one after the other, each once its CPU profile is measured) appends the nodes' pids to
# the caller's `pids` array and sets `nodes` to the comma-separated
# addresses the coordinator uses: each host's IPv4 with ADDRESS_PORT (7000 to reach the node
# itself, another port where something sits in front of it).
pool_bench_hosts() {
  source "$root/tests/integration/netns/netns.sh"
  if ! why="$(netns_unavailable_reason)"; then
    echo "$1: $why" >&2
    exit 2
  fi
  work="$(mktemp -d)"
  netns_setup "$2"
  pids=()
  emulators=()
  trap _pool_bench_cleanup EXIT
}

_pool_bench_cleanup() {
  for p in "${emulators[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  netns_teardown
  rm -rf "$work"
}

pool_nodes_start() {
  local work="$1" node="$2" model="$3" port="$4" count="${5:-3}"
  local coordinator trusted='{"devices": [' h id
  mkdir -p "$work/models"
  ln -s "$model" "$work/models/model.gguf"
  coordinator="$("$node" --print-device-id --config-dir "$work/cli")"
  nodes=""
  for h in $(seq "$count"); do
    id="$("$node" --print-device-id --config-dir "$work/node$h")"
    netns_exec "h$h" "$node" --name "node$h" --config-dir "$work/node$h" --port 7000 \
      --no-discovery --threads 1 --models-dir "$work/models" --trust "$coordinator" \
      >"$work/node$h.out" 2>&1 &
    pids+=($!)
    # One node profiles its CPU at a time (device_profile.h): started together, three nodes on
    # two cores would measure each other instead, and the planner would see unlike machines.
    for _ in $(seq 100); do grep -q "profile:" "$work/node$h.out" 2>/dev/null && break; sleep 0.1; done
    [ "$h" = 1 ] || trusted+=", "
    trusted+="{\"id\": \"$id\", \"name\": \"node$h\"}"
    nodes+="${nodes:+,}$(netns_ip "h$h"):$port"
  done
  trusted+=']}'
  printf '%s\n' "$trusted" >"$work/cli/trusted.json"
}

# pool_link_args PROFILE: the link emulator's options for each node's link in a home-LAN profile.
# "laptop-wifi": the nodes wired (1 GbE), the coordinator on Wi-Fi (pool_coordinator_link).
pool_link_args() {
  case "$1" in
    none) echo "" ;;
    1gbe | laptop-wifi) echo "--rtt-ms 0.3 --rate-mbit 940" ;;
    2.5gbe) echo "--rtt-ms 0.2 --rate-mbit 2350" ;;
    wifi) echo "--rtt-ms 4 --jitter-ms 2 --rate-mbit 200 --loss 0.001" ;;
    *) echo "unknown link profile '$1'" >&2; return 2 ;;
  esac
}

# pool_coordinator_link PROFILE: the coordinator's own link (RTT_MS,JITTER_MS,RATE_MBIT,LOSS), or
# nothing where it is wired.
pool_coordinator_link() {
  case "$1" in
    laptop-wifi) echo "4,2,200,0.001" ;;
    *) echo "" ;;
  esac
}

#   pool_links_start WORK EMULATOR PROFILE PORT [COUNT]
# puts a shoal_link_emulator with PROFILE in front of each of the COUNT (default three) nodes: on
# host hN it listens on PORT and forwards to the node's 7000 (pool_nodes_start's address port);
# appends the emulators' pids to the caller's `emulators` array. Every node sits behind such a
# link, so a connection from another node crosses two links (its own and this one:
# --two-links-from); one from the coordinator (host hCOUNT+1) crosses the coordinator's own link
# too where the profile gives it one (pool_coordinator_link), else only this one.
pool_links_start() {
  local work="$1" emulator="$2" profile="$3" port="$4" count="${5:-3}" args h others o hostArgs
  local coordinator
  args="$(pool_link_args "$profile")" || exit 2
  coordinator="$(pool_coordinator_link "$profile")"
  for h in $(seq "$count"); do
    others=""
    for o in $(seq "$count"); do
      [ "$o" = "$h" ] || others+="${others:+,}$(netns_ip "h$o")"
    done
    hostArgs="$args"
    [ -z "$args" ] || [ -z "$others" ] || hostArgs+=" --two-links-from $others"
    [ -z "$coordinator" ] || hostArgs+=" --sender-link $(netns_ip "h$((count + 1))")=$coordinator"
    # A simple command, not netns_exec (a function: `&` would fork a shell whose pid $! is, and
    # killing that would leave the emulator listening); ip netns exec execs the emulator.
    # shellcheck disable=SC2086
    ip netns exec "$(netns_ns "h$h")" "$emulator" --listen "$(netns_ip "h$h"):$port" \
      --connect 127.0.0.1:7000 --seed "$h" $hostArgs >>"$work/emulator$h.out" 2>&1 &
    emulators+=($!)
  done
  sleep 0.3
}
