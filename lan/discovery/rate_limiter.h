#pragma once
// Per-source token buckets for beacons: a LAN host may flood the discovery port, and each
// datagram costs a JSON parse and a peer-table look-up. Pure bookkeeping (time is passed in), so
// it is testable without sockets; not thread-safe (Discovery calls it on its io thread).

#include <chrono>
#include <cstddef>
#include <map>
#include <string>

#include "lan/discovery/peer_table.h"

namespace shoal::lan {

// A real sender's rate: one beacon per interval (1 s) per process, reaching us on up to three
// paths from one source address (IPv4 multicast, IPv4 broadcast, a unicast target); a machine
// running shoal-node, the app and `shoal-cli pool discover` at once sends ~9 a second from one
// address. 10/s sustained leaves that room; more from one address is a flood.
inline constexpr double kBeaconsPerSecondPerSource = 10;
// Burst: two seconds' worth, for processes that start together or a catch-up after a stall.
inline constexpr double kBeaconBurstPerSource = 20;
// Sources tracked at once. Each bucket is ~100 bytes; 1024 is four times the peer-table cap
// (kMaxPeers), room for every peer's IPv4 and IPv6 addresses. A sender spoofing more source
// addresses than this finds the table full: its new addresses are dropped until entries idle
// out (kSourceIdleForget), while sources already tracked (real peers beacon every second) keep
// being served.
inline constexpr size_t kMaxTrackedSources = 1024;
// A source silent this long is forgotten (its bucket is full again long before: 2 s at 10/s).
inline constexpr std::chrono::seconds kSourceIdleForget{10};

class SourceRateLimiter {
 public:
  SourceRateLimiter(double perSecond = kBeaconsPerSecondPerSource,
                    double burst = kBeaconBurstPerSource, size_t maxSources = kMaxTrackedSources)
      : m_perSecond(perSecond), m_burst(burst), m_maxSources(maxSources) {}

  // True when a datagram from `source` at `now` may be processed (one token taken). False when
  // that source's bucket is empty, or it is new and kMaxTrackedSources are tracked and none has
  // idled out.
  bool allow(const std::string& source, DiscoveryClock::time_point now);

  size_t trackedSources() const { return m_buckets.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    DiscoveryClock::time_point last;
  };
  void forgetIdle(DiscoveryClock::time_point now);

  double m_perSecond;
  double m_burst;
  size_t m_maxSources;
  std::map<std::string, Bucket> m_buckets;
};

}  // namespace shoal::lan
