#!/usr/bin/env bash
# The harness itself: two namespaced hosts reach each other over IPv4 and IPv6 link-local, nothing
# is left behind after teardown. Skips (77) without root / ip netns.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=netns.sh
source "$here/netns.sh"

netns_setup 2
prefix="$NETNS_PREFIX"

netns_ping h1 "$(netns_ip h2)"
netns_ping h2 "$(netns_ip h1)"
echo "ok: IPv4 ping both ways ($(netns_ip h1) <-> $(netns_ip h2))"

# The peer's link-local address (fe80::...) reached through the host's eth0.
ll2="$(netns_exec h2 ip -6 -o addr show dev eth0 scope link | awk '{print $4}' | cut -d/ -f1)"
[ -n "$ll2" ] || { echo "FAIL: h2 has no IPv6 link-local address" >&2; exit 1; }
netns_ping h1 "${ll2}%eth0"
echo "ok: IPv6 link-local ping h1 -> h2 ($ll2)"

# The caller's namespace is untouched and the teardown removes every namespace.
if ip link show | grep -q -E '(^| )(h[0-9]+|br0)[@:]'; then
  echo "FAIL: harness interfaces appeared in the caller's namespace" >&2
  exit 1
fi
netns_teardown
if ip netns list | grep -q "^${prefix}-"; then
  echo "FAIL: namespaces of $prefix left after teardown" >&2
  exit 1
fi
echo "ok: teardown removed ${prefix}-*"
