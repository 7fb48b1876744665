#pragma once
// Internal: the Connection implementation, a TLS 1.3 stream over TCP driven by one io thread that
// the connection owns. The io thread only moves bytes: it keeps one read outstanding (feeding a
// FrameDecoder and queueing whole Messages for receive()) and runs the writes send() hands it.
// Callers block in their own threads on condition variables with timeouts, never on the socket.
//
// Backpressure: reading pauses while the messages waiting for receive() are charged more than the
// window (each message: its blob, its JSON text times kJsonChargeFactor, kMessageChargeBytes),
// so a slow consumer slows the peer's writes down (TCP flow control) instead of growing memory
// without bound, whether the peer sends blobs, big JSON or a flood of tiny frames.
//
// Trust stages: a connection starts *unauthenticated*: it accepts only small frames
// (kPreAuthFrameLimits: JSON <= 16 KiB, no blob), reads in 4 KiB steps and pauses at a 64 KiB
// window, so a peer nobody has vouched for costs well under a megabyte. enterSession(), called
// once the peer's device ID is checked against the trust store, raises these to the session
// limits (kSessionFrameLimits, 64 MiB window).
//
// Lifecycle: construct (io thread starts), then either adoptAccepted() a socket and
// awaitClientHello() + serverHandshake(), or connectAndHandshake(); then send()/receive().
// Destruction closes and joins the io thread.

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/wire_format.h"

namespace shoal::lan {

class TlsConnection final : public Connection {
 public:
  // The backpressure window of a session: 64 MiB, one maximal blob.
  static constexpr size_t kMaxQueuedBytes = 64u << 20;
  // The window before the peer is trusted: a few pre-auth frames, not megabytes.
  static constexpr size_t kPreAuthMaxQueuedBytes = 64u << 10;
  // What one byte of JSON text is charged: a parsed nlohmann::json takes up to ~20 bytes of memory
  // per byte of text (the 2-byte array element "0," becomes a 16-byte value plus vector slack; an
  // object member a map node with its key). 16 is the order of that; strings, the common case in
  // real messages, cost less, so real traffic is over- rather than under-charged.
  static constexpr size_t kJsonChargeFactor = 16;
  // The fixed cost of one queued message (the Message, its queue slot, the JSON root and heap
  // headers): so that a flood of tiny frames hits the window too.
  static constexpr size_t kMessageChargeBytes = 256;

  explicit TlsConnection(std::shared_ptr<asio::ssl::context> context);
  ~TlsConnection() override;
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // The TCP socket.
  asio::ip::tcp::socket& socket() { return m_stream.next_layer(); }

  // Resolve, connect and TLS-handshake as the client, all within `timeout`. Throws TransportError
  // (Timeout, Io, Auth for a failed handshake).
  void connectAndHandshake(const std::string& host, uint16_t port,
                           std::chrono::milliseconds timeout);
  // Takes over a socket an acceptor accepted (on any io_context) and records its remote address
  // (peerAddress()); call before the connection is shared with another thread.
  void adoptAccepted(asio::ip::tcp::socket&& accepted);
  // Waits until the accepted client has sent something (the start of its TLS ClientHello), so a
  // client that connects and stays silent is dropped after `timeout` rather than the whole
  // handshake timeout. Throws TransportError (Timeout, closing the connection; Closed).
  void awaitClientHello(std::chrono::milliseconds timeout);
  // TLS-handshake as the server on the accepted socket within `timeout`. Throws TransportError.
  void serverHandshake(std::chrono::milliseconds timeout);

  // Raises the frame limits and the backpressure window from the pre-authentication ones to the
  // session ones (see the top). Call once the peer's device ID is trusted and before telling the
  // peer so (welcome / hello), so that its first session frame is already read under the session
  // limits. Any thread; idempotent.
  void enterSession();

  // SHA-256 of the peer certificate's DER (valid after a handshake).
  const std::vector<uint8_t>& peerCertificateDigest() const { return m_peerDigest; }

  void send(const Message& message, std::chrono::milliseconds timeout) override;
  Message receive(std::chrono::milliseconds timeout) override;
  const std::string& peerDeviceId() const override { return m_peerDeviceId; }
  const std::string& peerAddress() const override { return m_peerAddress; }
  void close() override;
  bool isOpen() const override;
  ConnectionStats stats() const override;

 private:
  using Done = std::function<void(const asio::error_code&)>;
  // Starts an asynchronous operation on the io thread and waits for it up to `timeout`; returns
  // its error code. On timeout the connection is closed (the operation is abandoned half-way, so
  // the stream is no longer usable) and TransportError(Timeout) is thrown. `what` names the step.
  asio::error_code runOp(const std::string& what, std::chrono::milliseconds timeout,
                         const std::function<void(Done)>& start);
  void afterHandshake();
  // The backpressure window for the current trust stage.
  size_t queueWindow() const;
  void startRead();
  void onRead(const asio::error_code& ec, size_t n);
  // Marks the connection closed for the reason given (first reason wins) and wakes waiters.
  void markClosed(TransportError::Kind kind, const std::string& reason, bool local);
  void closeSocket();  // io thread only
  std::string describe(const asio::error_code& ec) const;

  asio::io_context m_io;
  asio::executor_work_guard<asio::io_context::executor_type> m_work;
  std::shared_ptr<asio::ssl::context> m_context;
  asio::ssl::stream<asio::ip::tcp::socket> m_stream;
  std::thread m_thread;

  std::string m_peerDeviceId;
  std::string m_peerAddress;
  std::vector<uint8_t> m_peerDigest;

  // io thread only
  FrameDecoder m_decoder;
  std::vector<uint8_t> m_readBuffer;
  bool m_reading = false;

  // One frame on the wire at a time: a flag under its own mutex rather than std::timed_mutex, whose
  // timed lock (pthread_mutex_clocklock) ThreadSanitizer does not model.
  std::mutex m_sendSlotMutex;
  std::condition_variable m_sendSlotFree;
  bool m_sending = false;

  // Set by enterSession(); read by the io thread before each read and each header.
  std::atomic<bool> m_inSession{false};

  // A received message and what it is charged against the backpressure window.
  struct Queued {
    Message message;
    size_t charge = 0;
  };

  mutable std::mutex m_mutex;  // guards everything below
  std::condition_variable m_changed;
  std::deque<Queued> m_queue;
  size_t m_queuedCharge = 0;
  bool m_readPaused = false;
  bool m_closed = false;
  bool m_closedLocally = false;
  TransportError::Kind m_closeKind = TransportError::Kind::Closed;
  std::string m_closeReason;

  std::atomic<uint64_t> m_bytesSent{0};
  std::atomic<uint64_t> m_bytesReceived{0};
  std::atomic<uint64_t> m_messagesSent{0};
  std::atomic<uint64_t> m_messagesReceived{0};
  std::atomic<uint64_t> m_blobBytesReceived{0};
};

// Connects and TLS-handshakes as a client presenting `identity`, without any trust check (the
// caller pins the peer). Defined in connect.cpp. Throws TransportError.
std::unique_ptr<TlsConnection> openTlsClient(const std::string& host, uint16_t port,
                                             const Identity& identity,
                                             std::chrono::milliseconds timeout);

}  // namespace shoal::lan
