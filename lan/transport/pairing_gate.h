#pragma once
// Internal: the server side of pairing, owned by a Listener. Holds the current code with its
// expiry and failure count, each source address's failures and back-off, and runs one exchange on
// a connection that opened with pair_start. Thread-safe: several connections may try at once.
//
// Against guessing and against burning (protocol.md "Limits against a hostile LAN"):
//  - a code burns after kPairingMaxFailures failed exchanges in all (attempts in flight count, so
//    parallel guessing gets no more tries): each exchange is one online guess of 40 bits;
//  - each source address runs one exchange at a time and, after its n-th failure, waits
//    kPairingBackoffBase * 2^(n-1) (at most kPairingBackoffMax) before its next one, so one host
//    cannot use up the code's failures for everyone else;
//  - whether a code is active is never told to the peer: with no code (none set, expired, used,
//    burnt) the exchange runs with a random stand-in code, which fails exactly as a wrong code does
//    (SPAKE2 shares and confirmations of an unknown code look random either way).

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

class TlsConnection;

class PairingGate {
 public:
  void setCode(const std::string& code, std::chrono::seconds validFor);  // throws shoal::Error
  void clear();
  bool active() const;

  // Runs the exchange after `start` (a pair_start message) on `conn`, from the source address
  // `source` (sourceKey()); on success adds the peer to `trust` (under the name it sent). Always
  // leaves a reply on the wire (pair_reply, pair_ok or refused); the caller closes the connection
  // afterwards. Throws TransportError on I/O failures.
  void serve(TlsConnection& conn, const Message& start, const Identity& local,
             const std::string& localName, TrustStore& trust, std::chrono::milliseconds timeout,
             const std::string& source);

 private:
  using Clock = std::chrono::steady_clock;

  // One claimed exchange.
  struct Attempt {
    std::string code;   // normalized: the active code, or a random stand-in
    bool real = false;  // whether `code` is the active code (only then can it succeed)
    uint64_t generation = 0;
  };
  // A source address's record: its failures and when it may try again.
  struct Source {
    int failures = 0;
    Clock::time_point lastFailure;
    Clock::time_point retryAt;
    bool inFlight = false;
  };

  // Claims an exchange for `source`: nothing, with a refusal that speaks only of the source's own
  // attempts, while it must wait; else the code to run it with.
  std::optional<Attempt> claim(const std::string& source, std::string& refusal);
  void release(const Attempt& attempt, const std::string& source, bool success);
  // Makes room in m_sources for one more (mutex held).
  void forgetOldSources(Clock::time_point now);

  mutable std::mutex m_mutex;
  std::string m_code;  // normalized; empty when none
  Clock::time_point m_expires;
  int m_failures = 0;
  int m_inFlight = 0;
  uint64_t m_generation = 0;  // bumps when the code changes, so stale attempts do not count
  std::map<std::string, Source> m_sources;
};

}  // namespace shoal::lan
