#pragma once
// Accepting connections from peer nodes. A Listener owns an accept thread; each incoming
// connection is TLS-handshaken and vetted on a thread of its own before the application sees it:
//  - a trusted client (device ID in the TrustStore) that asks for a session is welcomed and handed
//    to onConnection;
//  - an untrusted client gets one "refused" frame naming the reason, and the connection closes;
//    it never reaches onConnection, so no request of it is ever processed;
//  - while a pairing code is set (setPairingCode), any client may run the pairing exchange
//    (pairing.h) instead; success adds it to the TrustStore, and it then connects normally.
// A client that does not complete the TLS handshake and its first frame within the handshake
// timeout is dropped, so a stalled or slow-loris peer holds nothing for long.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

class Listener {
 public:
  using OnConnection = std::function<void(std::unique_ptr<Connection>)>;

  // Binds bindHost:port ("0.0.0.0", "::", "127.0.0.1"; port 0 = an ephemeral port) and starts
  // accepting. `trust` must outlive the Listener (pairing adds to it). onConnection is called on
  // a listener thread, one call per accepted connection, possibly several at once; it should take
  // the connection and return (serve it on a thread of your own): stop() waits for running calls.
  // Throws TransportError(Io) when the address cannot be bound, Auth when the identity's PEM
  // does not load.
  Listener(const std::string& bindHost, uint16_t port, const Identity& identity, TrustStore& trust,
           OnConnection onConnection);
  ~Listener();  // stop()
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The bound port (the actual one when 0 was asked for).
  uint16_t port() const;

  // Allows pairing with `code` (any spelling normalizePairingCode accepts) for `validFor`.
  // The code is single-use: a successful pairing clears it; so do 5 failed attempts (each
  // started exchange that does not end in a correct confirmation counts). A new call replaces
  // the code and resets the count. Throws shoal::Error for a malformed code.
  void setPairingCode(std::string code, std::chrono::seconds validFor);
  void clearPairingCode();
  // Whether a pairing code is set, unexpired and not burnt (attempts still running count as
  // failures until they succeed).
  bool pairingCodeActive() const;

  // The name this node gives itself when pairing (stored in the peer's trust store). Default
  // "shoal".
  void setLocalName(std::string name);

  // How long a new connection may take for the TLS handshake and for its first frame (each).
  // Default 10 s.
  void setHandshakeTimeout(std::chrono::milliseconds timeout);

  // Stops accepting, drops connections still being vetted, and waits for running onConnection
  // calls. Connections already handed out are not affected. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shoal::lan
