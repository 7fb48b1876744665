#pragma once
// Accepting connections from peer nodes. A Listener owns an accept thread; each incoming
// connection is TLS-handshaken and vetted on a thread of its own before the application sees it:
//  - a trusted client (device ID in the TrustStore), or one the application says was introduced
//    (setIntroduced), that asks for a session is welcomed and handed to onConnection;
//  - an untrusted client gets one "refused" frame naming the reason, and the connection closes;
//    it never reaches onConnection, so no request of it is ever processed;
//  - while a pairing code is set (setPairingCode), any client may run the pairing exchange
//    (pairing.h) instead; success adds it to the TrustStore, and it then connects normally.
// What an unauthenticated client can hold is bounded (vetting_slots.h, protocol.md "Limits"):
//  - at most 4 connections per source address are vetted at once, 16 per IPv6 /64 from addresses
//    no trusted peer connected from, 64 in all, 16 of them kept for addresses trusted peers
//    connected from before; more are closed on arrival;
//  - a client that sends nothing (no TLS ClientHello) within 3 s is dropped, and one that does not
//    complete the TLS handshake and its first frame within the handshake timeout (10 s, counted
//    from the accept) is dropped too, so an idle or slow-loris peer holds a slot only briefly;
//  - until it is trusted a client may send only small frames (JSON <= 16 KiB, no blob);
//  - pairing failures are counted per source address with an exponential back-off, and a code
//    is burnt only after kPairingMaxFailures failures in all (pairing.h).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

// A client that connects must start its TLS handshake within this: an honest client sends its
// ClientHello at once; 3 s is generous for a loaded machine, and an idle socket from an attacker
// gives up its slot after it.
inline constexpr std::chrono::milliseconds kClientHelloTimeout{3000};
// Self-probe tokens remembered (sawSelfProbe). A node runs one clash check at a time and asks
// right after its reply; 16 leaves room for several instances sharing one identity.
inline constexpr size_t kMaxRememberedSelfProbes = 16;

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
  // The code is single-use: a successful pairing clears it; so do kPairingMaxFailures failed
  // attempts in all (each started exchange that does not end in a correct confirmation counts;
  // each source address also has to wait longer after each of its own failures). A new call
  // replaces the code and resets the count. Throws shoal::Error for a malformed code.
  void setPairingCode(std::string code, std::chrono::seconds validFor);
  void clearPairingCode();
  // Whether a pairing code is set, unexpired and not burnt (attempts still running count as
  // failures until they succeed).
  bool pairingCodeActive() const;

  // The name this node gives itself when pairing (stored in the peer's trust store). Default
  // "shoal".
  void setLocalName(std::string name);

  // Devices welcomed though the trust store does not know them: those a trusted coordinator
  // introduced for a deployment (direct forwarding between stages, lan/node/stage_links.h). The
  // application decides what such a connection may do (NodeService serves it only as a link).
  // Asked on a vetting thread for each hello from an untrusted device.
  void setIntroduced(std::function<bool(const std::string& deviceId)> introduced);

  // How long a new connection may take from its accept to its first frame, TLS handshake
  // included. Default 10 s. Its TLS ClientHello must start within kClientHelloTimeout (or this
  // timeout, if shorter).
  void setHandshakeTimeout(std::chrono::milliseconds timeout);

  // Whether a client presenting this listener's own certificate (our own device ID) sent a first
  // frame carrying "probe": token (one of the last kMaxRememberedSelfProbes). NodeService's
  // identity-clash check sends a fresh token and asks this afterwards: seen here means the
  // claimed endpoint is a TCP relay back to this very node, not a copy of its identity
  // (node_service.h). Recorded before the reply is sent, so a client that got any reply can ask.
  bool sawSelfProbe(const std::string& token) const;

  // Stops accepting, drops connections still being vetted, and waits for running onConnection
  // calls. Connections already handed out are not affected. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shoal::lan
