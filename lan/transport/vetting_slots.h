#pragma once
// Internal: who may hold a Listener's vetting slots. A connection is *being vetted* from its accept
// until it is handed to the application or dropped: TLS handshake, first frame, pairing. Each one
// costs two threads, so their number is bounded; and every slot an attacker holds is one a
// coordinator cannot use, so the bound must not be a lock-out. Three limits:
//  - kMaxVettingPerSource (4) per source, so one address holds at most 4 slots however fast it
//    reconnects;
//  - kMaxVetting (64) in all, so a flood costs a bounded number of threads (128);
//  - kReservedForKnownSources (16) of those only for sources a trusted peer has opened a session
//    from before: an attacker with many addresses (each of which it must claim on the LAN, and
//    which keep their slots only while they keep sending a handshake) fills at most 48, and a
//    coordinator that connected before still finds a slot.
// A source is an IPv4 address, or an IPv6 /64 (a host may use any address of its /64 at no cost);
// link-local IPv6 addresses, which all share fe80::/64, count one by one.
//
// Not thread-safe: the Listener's mutex guards it.

#include <asio/ip/address.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace shoal::lan {

// 4 per address: a coordinator opens one connection at a time per node (plus a reconnect or a
// pairing while the old one is still being torn down); 4 leaves slack for that and no more.
inline constexpr size_t kMaxVettingPerSource = 4;
// 64 in all: 16 attacker addresses' worth at 4 each, at 2 threads per connection 128 threads.
inline constexpr size_t kMaxVetting = 64;
// 16 of the 64 only for known sources: four known coordinators at their full per-source share.
inline constexpr size_t kReservedForKnownSources = 16;
// Sources remembered as known (the least recently trusted one is forgotten first): far more
// coordinators than a LAN pool has.
inline constexpr size_t kMaxKnownSources = 256;

// The key a connection from `address` is counted under (see the top).
std::string sourceKey(const asio::ip::address& address);

class VettingSlots {
 public:
  // A slot admit() granted, to hand back to release().
  struct Slot {
    std::string source;
    bool known = false;  // admitted as a known source (may have used a reserved slot)
  };

  // Takes a slot for a new connection from `source`, or nothing when a limit says no (the caller
  // closes the connection).
  std::optional<Slot> admit(const std::string& source);
  void release(const Slot& slot);

  // Remembers that a trusted peer opened a session from `source`; later connections from it may use
  // the reserved slots.
  void rememberTrusted(const std::string& source);
  bool isKnown(const std::string& source) const;

  // Connections being vetted: in all, from one source.
  size_t vetting() const { return m_total; }
  size_t vetting(const std::string& source) const;

 private:
  std::map<std::string, size_t> m_bySource;  // sources with at least one slot
  size_t m_total = 0;
  size_t m_unknown = 0;                     // slots held by sources not known at admission
  std::map<std::string, uint64_t> m_known;  // source -> when last trusted (m_clock)
  uint64_t m_clock = 0;
};

}  // namespace shoal::lan
