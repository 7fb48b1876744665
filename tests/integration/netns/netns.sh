#!/usr/bin/env bash
# netns.sh — throwaway LAN of N hosts made of Linux network namespaces, for multi-host tests.
# See README.md next to this file. Two ways to use it:
#
#   Sourced (bash tests):             Command line (C++ tests, see netns_hosts.h):
#     source netns.sh                   netns.sh check              # 0, or 77 + reason on stderr
#     netns_require        # exit 77    netns.sh create PREFIX N    # prints "h1 10.77.1.1" lines
#     netns_setup 3        # + trap     netns.sh destroy PREFIX
#     netns_exec h1 ping -c1 10.77.1.2  netns.sh add-lan PREFIX K H...  # eth<K> on those hosts
#     netns_add_lan 1 h1 h3  # eth1     netns.sh gc                 # remove leftovers of dead pids
#
# Layout for prefix P and N hosts: namespace "P-br" holds bridge br0; namespace "P-hI" (I = 1..N)
# holds eth0, one end of a veth pair whose other end (hI) is a port of br0 — created inside P-br
# and moved, so the caller's own namespace (the real network) is never touched. Host I gets
# ${NETNS_SUBNET}.I/24 (default 10.77.1.I), an IPv6 link-local address usable at once (DAD off),
# lo up, and a route for 224.0.0.0/4 on eth0. The bridge floods multicast (snooping off) and
# forwards at once (no STP), like a plain switch. Further LANs (add-lan K) make multi-homed
# hosts: bridge namespace "P-brK", interface ethK, addresses 10.77.(K+1).I/24.
#
# Prefixes are "shoalns<pid>" (bash, pid of the script) or "shoalns<pid>-<k>" (C++, k-th set of
# the test process) so concurrent runs never collide and `gc` can tell a dead run's leftovers.

NETNS_SUBNET="${NETNS_SUBNET:-10.77.1}"
NETNS_PREFIX="${NETNS_PREFIX:-}"
NETNS_COUNT=0

# Prints why namespaces cannot be used here, or nothing; status 0 when they can.
netns_unavailable_reason() {
  if [ "$(id -u)" != 0 ]; then
    echo "network namespaces need root (uid $(id -u))"
    return 1
  fi
  if ! command -v ip >/dev/null 2>&1; then
    echo "the ip command (iproute2) is not installed"
    return 1
  fi
  local probe="shoalnsprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ip netns add failed (no CAP_SYS_ADMIN or no netns support)"
    return 1
  fi
  ip netns del "$probe" 2>/dev/null
  return 0
}

# Exits 77 (the CTest/automake "skipped" code) with the reason when namespaces are unavailable.
netns_require() {
  local reason
  if ! reason="$(netns_unavailable_reason)"; then
    echo "SKIP: $reason" >&2
    exit 77
  fi
}

# netns_ns HOST -> namespace name; HOST is "h2", "2" or "br".
netns_ns() {
  local host="$1"
  case "$host" in
    br*) echo "${NETNS_PREFIX}-${host}" ;;
    h*) echo "${NETNS_PREFIX}-${host}" ;;
    *) echo "${NETNS_PREFIX}-h${host}" ;;
  esac
}

# netns_ip HOST -> the host's IPv4 address.
netns_ip() {
  local host="${1#h}"
  echo "${NETNS_SUBNET}.${host}"
}

# netns_lan_ip HOST LAN -> the host's IPv4 address on extra LAN k (netns_add_lan): 10.77.(k+1).i.
netns_lan_ip() {
  local host="${1#h}"
  echo "10.77.$(($2 + 1)).${host}"
}

# netns_exec HOST CMD... : run CMD inside the host's namespace (same stdin/stdout, exit status).
netns_exec() {
  local ns
  ns="$(netns_ns "$1")"
  shift
  # The suite confines discovery to lo outside namespaces (SHOAL_DISCOVERY_INTERFACES); inside
  # one, the host's own LAN is the point.
  ip netns exec "$ns" env -u SHOAL_DISCOVERY_INTERFACES "$@"
}

# netns_ping HOST ADDRESS: one ICMP echo from HOST (iputils ping when installed, else a raw-socket
# helper in Python). ADDRESS may be IPv6 link-local with a zone: fe80::1%eth0.
netns_ping() {
  local host="$1" address="$2"
  if command -v ping >/dev/null 2>&1; then
    if [[ "$address" == *:* ]]; then
      netns_exec "$host" ping -6 -c 1 -W 2 "$address" >/dev/null
    else
      netns_exec "$host" ping -c 1 -W 2 "$address" >/dev/null
    fi
  else
    netns_exec "$host" python3 "$(dirname "${BASH_SOURCE[0]}")/icmp_ping.py" "$address" 2
  fi
}

# _netns_create PREFIX N: builds the layout; returns non-zero on the first failing step.
_netns_create() {
  local prefix="$1" count="$2" i ns br
  br="${prefix}-br"
  ip netns add "$br" || return 1
  ip -n "$br" link set lo up || return 1
  ip -n "$br" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 || return 1
  ip -n "$br" link set br0 up || return 1
  for ((i = 1; i <= count; i++)); do
    ns="${prefix}-h${i}"
    ip netns add "$ns" || return 1
    # DAD off before any link comes up: the link-local address is usable immediately.
    # (/proc/sys/net is per namespace; written directly so procps' sysctl is not needed.)
    ip netns exec "$ns" sh -c 'echo 0 >/proc/sys/net/ipv6/conf/all/accept_dad &&
      echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad' 2>/dev/null || true
    ip -n "$br" link add "h${i}" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$br" link set "h${i}" master br0 || return 1
    ip -n "$br" link set "h${i}" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "${NETNS_SUBNET}.${i}/24" broadcast "${NETNS_SUBNET}.255" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    ip -n "$ns" route add 224.0.0.0/4 dev eth0 || return 1
  done
  return 0
}

# _netns_add_lan PREFIX K HOST...: a further LAN k (1, 2, ...): bridge namespace P-br<k>, and in
# each listed host an interface eth<k> with 10.77.(k+1).<i>/24 — multi-homed hosts.
_netns_add_lan() {
  local prefix="$1" lan="$2" i br ns
  shift 2
  br="${prefix}-br${lan}"
  ip netns add "$br" || return 1
  ip -n "$br" link set lo up || return 1
  ip -n "$br" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 || return 1
  ip -n "$br" link set br0 up || return 1
  for i in "$@"; do
    i="${i#h}"
    ns="${prefix}-h${i}"
    ip -n "$br" link add "h${i}" type veth peer name "eth${lan}" netns "$ns" || return 1
    ip -n "$br" link set "h${i}" master br0 || return 1
    ip -n "$br" link set "h${i}" up || return 1
    ip -n "$ns" addr add "10.77.$((lan + 1)).${i}/24" broadcast "10.77.$((lan + 1)).255" \
      dev "eth${lan}" || return 1
    ip -n "$ns" link set "eth${lan}" up || return 1
  done
  return 0
}

# netns_add_lan K HOST...: see _netns_add_lan; after netns_setup. Exits 1 on failure.
netns_add_lan() {
  if ! _netns_add_lan "$NETNS_PREFIX" "$@"; then
    echo "netns_add_lan: LAN $1 for hosts ${*:2} under $NETNS_PREFIX failed" >&2
    exit 1
  fi
}

# _netns_destroy PREFIX: kills every process left in the prefix's namespaces, then deletes them
# (deleting a namespace destroys its veth ends). Quiet and idempotent.
_netns_destroy() {
  local prefix="$1" ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(br[0-9]*|h[0-9]+)\$"); do
    pids="$(ip netns pids "$ns" 2>/dev/null)"
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
}

# Removes namespaces of runs whose creating process is gone (a crashed test cannot run its trap).
# Names are "shoalns<pid>" + optional "-<k>" (several sets in one process) + "-br" / "-h<i>".
netns_gc() {
  local ns pid pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^shoalns[0-9]+(-[0-9]+)?-(br[0-9]*|h[0-9]+)$'); do
    pid="${ns#shoalns}"
    pid="${pid%%-*}"
    if ! kill -0 "$pid" 2>/dev/null; then
      pids="$(ip netns pids "$ns" 2>/dev/null)"
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
}

# netns_setup N: creates N hosts under $NETNS_PREFIX (default shoalns$$) and installs an EXIT/INT/
# TERM trap that tears them down. Calls netns_require first. Fails the script (exit 1) when a
# step fails, after tearing down what was built.
netns_setup() {
  local count="$1"
  netns_require
  NETNS_PREFIX="${NETNS_PREFIX:-shoalns$$}"
  NETNS_COUNT="$count"
  trap netns_teardown EXIT
  trap 'netns_teardown; exit 130' INT
  trap 'netns_teardown; exit 143' TERM
  netns_gc
  if ! _netns_create "$NETNS_PREFIX" "$count"; then
    echo "netns_setup: building $count hosts under $NETNS_PREFIX failed" >&2
    netns_teardown
    exit 1
  fi
}

netns_teardown() {
  if [ -n "$NETNS_PREFIX" ]; then
    _netns_destroy "$NETNS_PREFIX"
  fi
}

# Command-line mode (used by tests/integration/netns/netns_hosts.cpp); `return` succeeds only
# when sourced (comparing BASH_SOURCE with $0 fails under `bash -c 'source netns.sh' netns.sh`).
if ! (return 0 2>/dev/null); then
  set -u
  cmd="${1:-}"
  case "$cmd" in
    check)
      if ! reason="$(netns_unavailable_reason)"; then
        echo "$reason" >&2
        exit 77
      fi
      ;;
    create)
      [ $# -eq 3 ] || { echo "usage: netns.sh create PREFIX N" >&2; exit 2; }
      NETNS_PREFIX="$2"
      case "$3" in '' | *[!0-9]*) echo "netns.sh: host count '$3' is not a number" >&2; exit 2 ;; esac
      if [ "$3" -lt 1 ] || [ "$3" -gt 250 ]; then
        echo "netns.sh: host count $3 outside 1..250 (one /24)" >&2
        exit 2
      fi
      if ! reason="$(netns_unavailable_reason)"; then
        echo "$reason" >&2
        exit 77
      fi
      netns_gc
      if ! _netns_create "$2" "$3"; then
        echo "netns.sh: building $3 hosts under $2 failed" >&2
        _netns_destroy "$2"
        exit 1
      fi
      for ((i = 1; i <= $3; i++)); do
        echo "h$i $(netns_ns "$i") $(netns_ip "$i")"
      done
      ;;
    add-lan)
      [ $# -ge 4 ] || { echo "usage: netns.sh add-lan PREFIX K HOST..." >&2; exit 2; }
      case "$3" in '' | *[!0-9]* | 0) echo "netns.sh: LAN number '$3' must be 1, 2, ..." >&2; exit 2 ;; esac
      if ! _netns_add_lan "$2" "$3" "${@:4}"; then
        echo "netns.sh: LAN $3 for hosts ${*:4} under $2 failed" >&2
        exit 1
      fi
      for host in "${@:4}"; do
        echo "h${host#h} eth$3 $(netns_lan_ip "$host" "$3")"
      done
      ;;
    destroy)
      [ $# -eq 2 ] || { echo "usage: netns.sh destroy PREFIX" >&2; exit 2; }
      _netns_destroy "$2"
      ;;
    gc)
      netns_gc
      ;;
    *)
      echo "usage: netns.sh check | create PREFIX N | add-lan PREFIX K HOST... | destroy PREFIX | gc" >&2
      exit 2
      ;;
  esac
fi
