#include "lan/transport/tls_connection.h"

#include <unistd.h>

#include "lan/transport/identity.h"
#include "lan/transport/tls_context.h"

namespace shoal::lan {

namespace {

constexpr size_t kReadChunk = 64u << 10;
// Before the peer is trusted, read in small steps: the window is checked after each read, so a
// 64 KiB read of tiny frames could queue thousands of messages past it at once.
constexpr size_t kPreAuthReadChunk = 4u << 10;

std::string millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// Errors that mean "the peer went away" rather than a fault of the network stack.
bool isClosedError(const asio::error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
         ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
         ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor ||
         ec == asio::error::not_connected;
}

}  // namespace

TlsConnection::TlsConnection(std::shared_ptr<asio::ssl::context> context)
    : m_work(asio::make_work_guard(m_io)),
      m_context(std::move(context)),
      m_stream(m_io, *m_context),
      m_readBuffer(kReadChunk) {
  m_thread = std::thread([this] {
    // Handlers do not throw; a stray exception must still not take the process down.
    for (;;) {
      try {
        m_io.run();
        return;
      } catch (...) {
      }
    }
  });
}

TlsConnection::~TlsConnection() {
  close();
  // With the socket closed every outstanding operation completes (aborted); run() then returns
  // once the work guard is gone.
  m_work.reset();
  if (m_thread.joinable()) m_thread.join();
}

std::string TlsConnection::describe(const asio::error_code& ec) const {
  return (m_peerAddress.empty() ? std::string("peer") : m_peerAddress) + ": " + ec.message();
}

asio::error_code TlsConnection::runOp(const std::string& what, std::chrono::milliseconds timeout,
                                      const std::function<void(Done)>& start) {
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    asio::error_code ec;
  };
  auto state = std::make_shared<State>();
  Done done = [state](const asio::error_code& ec) {
    std::lock_guard lock(state->mutex);
    state->done = true;
    state->ec = ec;
    state->cv.notify_all();
  };
  // `start` is captured by reference: this function does not return before `done` ran, which
  // happens only after `start` did.
  asio::post(m_io, [&start, done] { start(done); });
  std::unique_lock lock(state->mutex);
  if (state->cv.wait_for(lock, timeout, [&] { return state->done; })) return state->ec;
  lock.unlock();
  markClosed(TransportError::Kind::Closed, m_peerAddress + ": closed after " + what + " timed out",
             false);
  asio::post(m_io, [this] { closeSocket(); });
  lock.lock();
  state->cv.wait(lock, [&] { return state->done; });  // the abandoned operation completes, aborted
  throw TransportError(TransportError::Kind::Timeout,
                       (m_peerAddress.empty() ? std::string("peer") : m_peerAddress) + ": " + what +
                           " timed out after " + millis(timeout));
}

void TlsConnection::connectAndHandshake(const std::string& host, uint16_t port,
                                        std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  m_peerAddress = host + ":" + std::to_string(port);
  std::vector<asio::ip::tcp::endpoint> endpoints;
  asio::error_code ec;
  const asio::ip::address literal = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(literal, port);
  } else {
    asio::ip::tcp::resolver resolver(m_io);
    ec = runOp("resolving " + host, remaining(), [&](Done done) {
      resolver.async_resolve(host, std::to_string(port),
                             [&endpoints, done](const asio::error_code& e,
                                                asio::ip::tcp::resolver::results_type results) {
                               for (const auto& r : results) endpoints.push_back(r.endpoint());
                               done(e);
                             });
    });
    if (ec || endpoints.empty())
      throw TransportError(TransportError::Kind::Io,
                           "cannot resolve " + host + ": " + (ec ? ec.message() : "no address"));
  }
  ec = runOp("connecting", remaining(), [&](Done done) {
    asio::async_connect(
        socket(), endpoints,
        [done](const asio::error_code& e, const asio::ip::tcp::endpoint&) { done(e); });
  });
  if (ec) throw TransportError(TransportError::Kind::Io, "cannot connect to " + describe(ec));
  socket().set_option(asio::ip::tcp::no_delay(true), ec);  // small control frames must not wait
  ec = runOp("TLS handshake", remaining(),
             [&](Done done) { m_stream.async_handshake(asio::ssl::stream_base::client, done); });
  if (ec) throw TransportError(TransportError::Kind::Auth, "TLS handshake with " + describe(ec));
  afterHandshake();
}

void TlsConnection::adoptAccepted(asio::ip::tcp::socket&& accepted) {
  asio::error_code ec;
  const auto remote = accepted.remote_endpoint(ec);
  if (!ec) m_peerAddress = remote.address().to_string() + ":" + std::to_string(remote.port());
  const auto protocol = remote.protocol();
  // Sockets belong to an io_context; hand the descriptor over to ours.
  const auto fd = accepted.release(ec);
  if (ec) throw TransportError(TransportError::Kind::Io, "accepting " + describe(ec));
  socket().assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    throw TransportError(TransportError::Kind::Io, "accepting " + describe(ec));
  }
}

void TlsConnection::awaitClientHello(std::chrono::milliseconds timeout) {
  const asio::error_code ec = runOp("waiting for the TLS ClientHello", timeout, [&](Done done) {
    socket().async_wait(asio::socket_base::wait_read, done);
  });
  if (ec)
    throw TransportError(
        isClosedError(ec) ? TransportError::Kind::Closed : TransportError::Kind::Io,
        "waiting for the TLS ClientHello from " + describe(ec));
}

void TlsConnection::enterSession() { m_inSession = true; }

size_t TlsConnection::queueWindow() const {
  return m_inSession ? kMaxQueuedBytes : kPreAuthMaxQueuedBytes;
}

void TlsConnection::serverHandshake(std::chrono::milliseconds timeout) {
  asio::error_code ec;
  socket().set_option(asio::ip::tcp::no_delay(true), ec);
  ec = runOp("TLS handshake", timeout,
             [&](Done done) { m_stream.async_handshake(asio::ssl::stream_base::server, done); });
  if (ec) throw TransportError(TransportError::Kind::Auth, "TLS handshake with " + describe(ec));
  afterHandshake();
}

void TlsConnection::afterHandshake() {
  m_peerDigest = lan::peerCertificateDigest(m_stream.native_handle());
  m_peerDeviceId = formatDeviceId(m_peerDigest);
  asio::post(m_io, [this] { startRead(); });
}

void TlsConnection::startRead() {
  if (m_reading) return;
  {
    std::lock_guard lock(m_mutex);
    if (m_closed || m_readPaused) return;
  }
  m_reading = true;
  const size_t chunk = m_inSession ? kReadChunk : kPreAuthReadChunk;
  m_stream.async_read_some(asio::buffer(m_readBuffer.data(), chunk),
                           [this](const asio::error_code& ec, size_t n) { onRead(ec, n); });
}

void TlsConnection::onRead(const asio::error_code& ec, size_t n) {
  m_reading = false;
  if (ec) {
    markClosed(isClosedError(ec) ? TransportError::Kind::Closed : TransportError::Kind::Io,
               m_peerAddress + ": connection closed (" + ec.message() + ")", false);
    closeSocket();
    return;
  }
  m_bytesReceived += n;
  std::string protocolError;
  try {
    m_decoder.setLimits(m_inSession ? kSessionFrameLimits : kPreAuthFrameLimits);
    m_decoder.feed(std::span<const uint8_t>(m_readBuffer.data(), n));
  } catch (const TransportError& e) {
    protocolError = e.what();
  }
  {
    // Frames that decoded before a malformed one are still delivered, then the error.
    std::lock_guard lock(m_mutex);
    bool any = false;
    while (auto frame = m_decoder.nextFrame()) {
      m_messagesReceived++;
      m_blobBytesReceived += frame->message.blob.size();
      const size_t charge =
          frame->message.blob.size() + frame->jsonBytes * kJsonChargeFactor + kMessageChargeBytes;
      m_queuedCharge += charge;
      m_queue.push_back({std::move(frame->message), charge});
      any = true;
    }
    if (any) m_changed.notify_all();
  }
  if (!protocolError.empty()) {
    markClosed(TransportError::Kind::Protocol, m_peerAddress + ": " + protocolError, false);
    closeSocket();
    return;
  }
  {
    std::lock_guard lock(m_mutex);
    if (m_queuedCharge >= queueWindow()) {
      m_readPaused = true;  // receive() resumes reading once the queue drains
      return;
    }
  }
  startRead();
}

void TlsConnection::send(const Message& message, std::chrono::milliseconds timeout) {
  const std::string json = encodeControl(message);
  const auto header = encodeFrameHeader(static_cast<uint32_t>(json.size()),
                                        static_cast<uint32_t>(message.blob.size()));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::unique_lock slot(m_sendSlotMutex);
    if (!m_sendSlotFree.wait_until(slot, deadline, [&] { return !m_sending; }))
      throw TransportError(TransportError::Kind::Timeout,
                           m_peerAddress + ": send waited " + millis(timeout) +
                               " behind another send that is still writing");
    m_sending = true;
  }
  struct ReleaseSlot {
    TlsConnection* self;
    ~ReleaseSlot() {
      std::lock_guard slot(self->m_sendSlotMutex);
      self->m_sending = false;
      self->m_sendSlotFree.notify_one();
    }
  } releaseSlot{this};
  {
    std::lock_guard lock(m_mutex);
    if (m_closed)
      throw TransportError(
          TransportError::Kind::Closed,
          m_peerAddress + ": cannot send on a closed connection (" + m_closeReason + ")");
  }
  // The buffers point into `json`, `header` and the caller's blob: runOp returns only after the
  // write has completed or been aborted, so they outlive it.
  const std::array<asio::const_buffer, 3> buffers = {asio::buffer(header), asio::buffer(json),
                                                     asio::buffer(message.blob)};
  // The whole send (waiting for the slot included) stays within the caller's timeout.
  const auto left =
      std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now()));
  if (left.count() == 0)  // nothing written yet: the connection stays usable
    throw TransportError(TransportError::Kind::Timeout, m_peerAddress + ": send timed out after " +
                                                            millis(timeout) +
                                                            " waiting behind another send");
  const asio::error_code ec = runOp("send", left, [&](Done done) {
    asio::async_write(m_stream, buffers, [done](const asio::error_code& e, size_t) { done(e); });
  });
  if (ec) {
    const bool closed = isClosedError(ec);
    markClosed(closed ? TransportError::Kind::Closed : TransportError::Kind::Io,
               m_peerAddress + ": connection closed while sending (" + ec.message() + ")", false);
    throw TransportError(closed ? TransportError::Kind::Closed : TransportError::Kind::Io,
                         "send to " + describe(ec));
  }
  m_bytesSent += header.size() + json.size() + message.blob.size();
  m_messagesSent++;
}

Message TlsConnection::receive(std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_mutex);
  m_changed.wait_for(lock, timeout,
                     [&] { return m_closedLocally || !m_queue.empty() || m_closed; });
  if (m_closedLocally)
    throw TransportError(TransportError::Kind::Closed, m_peerAddress + ": connection closed");
  if (!m_queue.empty()) {
    Message m = std::move(m_queue.front().message);
    m_queuedCharge -= m_queue.front().charge;
    m_queue.pop_front();
    if (m_readPaused && m_queuedCharge < queueWindow()) {
      m_readPaused = false;
      asio::post(m_io, [this] { startRead(); });
    }
    return m;
  }
  // Messages that arrived before the peer closed were delivered above; now report why it ended.
  if (m_closed) throw TransportError(m_closeKind, m_closeReason);
  throw TransportError(TransportError::Kind::Timeout,
                       m_peerAddress + ": no message within " + millis(timeout));
}

void TlsConnection::markClosed(TransportError::Kind kind, const std::string& reason, bool local) {
  std::lock_guard lock(m_mutex);
  if (!m_closed) {
    m_closed = true;
    m_closeKind = kind;
    m_closeReason = reason;
  }
  if (local) m_closedLocally = true;
  m_changed.notify_all();
}

void TlsConnection::close() {
  markClosed(TransportError::Kind::Closed, m_peerAddress + ": connection closed locally", true);
  asio::post(m_io, [this] { closeSocket(); });
}

void TlsConnection::closeSocket() {
  asio::error_code ignored;
  // No TLS close_notify: closing must not wait on a peer that may be the reason we close.
  m_stream.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  m_stream.lowest_layer().close(ignored);
}

bool TlsConnection::isOpen() const {
  std::lock_guard lock(m_mutex);
  return !m_closed;
}

ConnectionStats TlsConnection::stats() const {
  ConnectionStats s;
  s.bytesSent = m_bytesSent;
  s.bytesReceived = m_bytesReceived;
  s.messagesSent = m_messagesSent;
  s.messagesReceived = m_messagesReceived;
  s.blobBytesReceived = m_blobBytesReceived;
  return s;
}

}  // namespace shoal::lan
