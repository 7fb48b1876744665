#!/usr/bin/env python3
"""One ICMP echo (IPv4 or IPv6) for machines without iputils-ping; used by netns.sh's netns_ping.

usage: icmp_ping.py ADDRESS [TIMEOUT_S]   (ADDRESS may be fe80::1%eth0). Needs root (raw socket).
Exit 0 when the echo reply arrives, 1 otherwise. The kernel of the peer answers by itself.
"""
import os
import select
import socket
import struct
import sys
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def main() -> int:
    address = sys.argv[1]
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    v6 = ":" in address
    info = socket.getaddrinfo(address, None, socket.AF_INET6 if v6 else socket.AF_INET,
                              socket.SOCK_RAW)[0]
    sock = socket.socket(info[0], socket.SOCK_RAW,
                         socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    # Echo request: type 8 (v4) / 128 (v6), code 0; the kernel fills the ICMPv6 checksum.
    request_type, reply_type = (128, 129) if v6 else (8, 0)
    payload = b"shoal-netns"
    header = struct.pack("!BBHHH", request_type, 0, 0, ident, 1)
    if not v6:
        header = struct.pack("!BBHHH", request_type, 0, checksum(header + payload), ident, 1)
    sock.sendto(header + payload, info[4])
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            break
        packet = sock.recv(2048)
        icmp = packet if v6 else packet[(packet[0] & 0x0F) * 4:]  # v4 raw sockets keep the IP header
        if len(icmp) >= 8:
            kind, _, _, got_ident, _ = struct.unpack("!BBHHH", icmp[:8])
            if kind == reply_type and got_ident == ident:
                return 0
    print(f"icmp_ping: no echo reply from {address} within {timeout} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
