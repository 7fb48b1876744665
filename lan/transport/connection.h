#pragma once
// An authenticated, encrypted connection to one peer node (TLS 1.3, both sides pinned to
// trusted device IDs; see identity.h, trust_store.h). Carries Messages as frames.
//
// Threading: send() may be called from any thread (calls are serialized inside); receive() is
// called by one reader thread at a time. send() and receive() may run concurrently.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "lan/transport/message.h"

namespace shoal::lan {

// Every transport failure: timeout, peer closed, protocol violation, TLS/auth failure.
// what() is one line naming the peer and the cause.
class TransportError : public std::runtime_error {
 public:
  enum class Kind { Timeout, Closed, Protocol, Auth, Io };
  TransportError(Kind kind, const std::string& message)
      : std::runtime_error(message), m_kind(kind) {}
  Kind kind() const { return m_kind; }

 private:
  Kind m_kind;
};

struct ConnectionStats {
  uint64_t bytesSent = 0;  // on the wire, frame headers included
  uint64_t bytesReceived = 0;
  uint64_t messagesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t blobBytesReceived = 0;  // payload bytes only (weights counters use this)
};

class Connection {
 public:
  virtual ~Connection() = default;

  // Queue and write one message; blocks while the peer is not reading (backpressure) up to the
  // timeout. Throws TransportError.
  virtual void send(const Message& message,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30)) = 0;

  // Wait for the next message. Throws TransportError (Kind::Timeout when nothing arrived in
  // time; the connection stays usable after a timeout).
  virtual Message receive(std::chrono::milliseconds timeout) = 0;

  // The verified device ID of the peer (identity.h), e.g. "MFZWI3D-BONSGYC-...".
  virtual const std::string& peerDeviceId() const = 0;
  // "host:port" of the peer, for logs.
  virtual const std::string& peerAddress() const = 0;

  // Close now; a blocked receive()/send() in another thread returns with Kind::Closed.
  virtual void close() = 0;
  virtual bool isOpen() const = 0;

  virtual ConnectionStats stats() const = 0;
};

}  // namespace shoal::lan
