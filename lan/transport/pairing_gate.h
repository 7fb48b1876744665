#pragma once
// Internal: the server side of pairing, owned by a Listener. Holds the current code with its
// expiry and failure count, and runs one exchange on a connection that opened with pair_start.
// Thread-safe: several connections may try at once; the count of started exchanges is checked
// when each starts, so parallel guessing gets no more than kPairingMaxFailures tries either.

#include <chrono>
#include <cstdint>
#include <mutex>
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

  // Runs the exchange after `start` (a pair_start message) on `conn`; on success adds the peer to
  // `trust` (under the name it sent). Always leaves a reply on the wire (pair_ok or refused);
  // the caller closes the connection afterwards. Throws TransportError on I/O failures.
  void serve(TlsConnection& conn, const Message& start, const Identity& local,
             const std::string& localName, TrustStore& trust, std::chrono::milliseconds timeout);

 private:
  // Claims one attempt: false (with the reason) when no code can be tried now; else the code and
  // its generation, to hand back to release().
  bool claim(std::string& code, uint64_t& generation, std::string& reason);
  void release(bool success, uint64_t generation);

  mutable std::mutex m_mutex;
  std::string m_code;  // normalized; empty when none
  std::chrono::steady_clock::time_point m_expires;
  int m_failures = 0;
  int m_inFlight = 0;
  uint64_t m_generation = 0;  // bumps when the code changes, so stale attempts do not count
};

}  // namespace shoal::lan
