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
// A source is one address: IPv4, or IPv6 (an IPv4-mapped one counts as its IPv4 address). Not an
// IPv6 /64: a home LAN usually shares one /64, so every host there would fall under one key (one
// stalled peer would block them all, and one trusted coordinator would make all of them known). But
// a host may use any address of its /64 at no cost (privacy addresses), so there is a fourth limit:
//  - kMaxVettingPerPrefix (16) slots for unknown sources per global IPv6 /64, so one host rotating
//    addresses holds at most 16, not all 48 unreserved ones. Known sources do not count against it
//    (their number is bounded by the reserved share and the total), so such a host cannot lock a
//    known coordinator of its own /64 out either. Link-local addresses (all of them share
//    fe80::/64) have no prefix limit; the unreserved share bounds them.
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
// 16 per IPv6 /64 (unknown sources only): four hosts of a shared LAN /64 at their full share while
// a fifth rotates privacy addresses; one such host holds a third of the unreserved slots, not all.
inline constexpr size_t kMaxVettingPerPrefix = 16;
// Sources remembered as known (the least recently trusted one is forgotten first): far more
// coordinators than a LAN pool has.
inline constexpr size_t kMaxKnownSources = 256;

// The key a connection from `address` is counted under (see the top): the address itself, an
// IPv4-mapped IPv6 one as IPv4, a link-local one with its scope.
std::string sourceKey(const asio::ip::address& address);
// The global IPv6 /64 `address` belongs to ("2001:db8:1:2::/64"), counted against
// kMaxVettingPerPrefix; empty for IPv4 (mapped ones included) and link-local addresses.
std::string prefixKey(const asio::ip::address& address);

class VettingSlots {
 public:
  // A slot admit() granted, to hand back to release().
  struct Slot {
    std::string source;
    std::string prefix;  // prefixKey(), empty when none
    bool known = false;  // admitted as a known source (may have used a reserved slot)
  };

  // Takes a slot for a new connection from `source` (sourceKey()) in `prefix` (prefixKey(); empty:
  // none), or nothing when a limit says no (the caller closes the connection).
  std::optional<Slot> admit(const std::string& source, const std::string& prefix = {});
  void release(const Slot& slot);

  // Remembers that a trusted peer opened a session from `source`; later connections from it may use
  // the reserved slots.
  void rememberTrusted(const std::string& source);
  bool isKnown(const std::string& source) const;

  // Connections being vetted: in all, from one source.
  size_t vetting() const { return m_total; }
  size_t vetting(const std::string& source) const;
  // Slots held by unknown sources of an IPv6 /64.
  size_t vettingInPrefix(const std::string& prefix) const;

 private:
  std::map<std::string, size_t> m_bySource;  // sources with at least one slot
  std::map<std::string, size_t> m_byPrefix;  // /64s with at least one slot of an unknown source
  size_t m_total = 0;
  size_t m_unknown = 0;                     // slots held by sources not known at admission
  std::map<std::string, uint64_t> m_known;  // source -> when last trusted (m_clock)
  uint64_t m_clock = 0;
};

}  // namespace shoal::lan
