#!/usr/bin/env bash
# private_lan.sh COMMAND [ARGS...]: run COMMAND in a private network namespace whose only network
# is a veth pair (v0 10.78.0.1/24 <-> v1), so LAN discovery (multicast, broadcast) works among
# the processes of one test and no datagram reaches a real network. Used by tests that need
# discovery between processes on one machine (tests/gui test_pool_live).
#
# Without root or unshare it runs COMMAND as it is: discovery then stays on lo
# (SHOAL_DISCOVERY_INTERFACES=lo, set for every test) and tests that need a LAN skip.
set -euo pipefail
if [[ $EUID -eq 0 ]] && command -v unshare >/dev/null && unshare --net true 2>/dev/null; then
    # shellcheck disable=SC2016
    exec unshare --net sh -c '
        ip link set lo up &&
        ip link add v0 type veth peer name v1 &&
        ip link set v1 up && ip link set v0 up &&
        ip addr add 10.78.0.1/24 dev v0 &&
        exec env -u SHOAL_DISCOVERY_INTERFACES "$@"' sh "$@"
fi
exec "$@"
