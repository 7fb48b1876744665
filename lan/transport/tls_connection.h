#pragma once
// Internal: the Connection implementation, a TLS 1.3 stream over TCP driven by one io thread that
// the connection owns. The io thread only moves bytes: it keeps one read outstanding (feeding a
// FrameDecoder and queueing whole Messages for receive()) and runs the writes send() hands it.
// Callers block in their own threads on condition variables with timeouts, never on the socket.
//
// Backpressure: reading pauses while more than kMaxQueuedBytes of received blobs wait for
// receive(), so a slow consumer slows the peer's writes down (TCP flow control) instead of
// growing memory without bound.
//
// Lifecycle: construct (io thread starts), then either accept into socket() and serverHandshake()
// or connectAndHandshake(); then send()/receive(). Destruction closes and joins the io thread.

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
  static constexpr size_t kMaxQueuedBytes = 64u << 20;

  explicit TlsConnection(std::shared_ptr<asio::ssl::context> context);
  ~TlsConnection() override;
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // The TCP socket, for an acceptor to accept into (before serverHandshake()).
  asio::ip::tcp::socket& socket() { return m_stream.next_layer(); }

  // Resolve, connect and TLS-handshake as the client, all within `timeout`. Throws TransportError
  // (Timeout, Io, Auth for a failed handshake).
  void connectAndHandshake(const std::string& host, uint16_t port,
                           std::chrono::milliseconds timeout);
  // Records the accepted socket's remote address (peerAddress()); call right after the accept,
  // before the connection is shared with another thread.
  void acceptedFromSocket();
  // TLS-handshake as the server on the accepted socket within `timeout`. Throws TransportError.
  void serverHandshake(std::chrono::milliseconds timeout);

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

  mutable std::mutex m_mutex;  // guards everything below
  std::condition_variable m_changed;
  std::deque<Message> m_queue;
  size_t m_queuedBytes = 0;
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
