#pragma once
// Helpers for the loopback transport tests: a node (identity + trust), an inbox collecting what a
// Listener hands out, and raw clients that speak bytes instead of Messages.

#include <sys/socket.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/spake2.h"
#include "lan/transport/tls_context.h"
#include "lan/transport/trust_store.h"
#include "lan/transport/wire_format.h"

namespace shoal::lan::test {

struct Node {
  Identity identity = createIdentity();
  TrustStore trust;
};

// Collects the connections a Listener accepts.
class Inbox {
 public:
  Listener::OnConnection callback() {
    return [this](std::unique_ptr<Connection> c) {
      std::lock_guard lock(m_mutex);
      m_queue.push_back(std::move(c));
      ++m_count;
      m_changed.notify_all();
    };
  }
  // The next accepted connection, or null when none arrives in `timeout`.
  std::unique_ptr<Connection> take(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(m_mutex);
    if (!m_changed.wait_for(lock, timeout, [&] { return !m_queue.empty(); })) return nullptr;
    auto c = std::move(m_queue.front());
    m_queue.pop_front();
    return c;
  }
  int count() {
    std::lock_guard lock(m_mutex);
    return m_count;
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::deque<std::unique_ptr<Connection>> m_queue;
  int m_count = 0;
};

// Reads from `read` (a blocking read_some) on another thread until the peer closes; `unblock`
// is called if that takes longer than a safety limit, so a broken server fails the test instead
// of hanging it. Returns the bytes read and whether the peer closed on its own.
template <class ReadSome>
std::pair<std::vector<uint8_t>, bool> readUntilClosed(ReadSome read, int fd) {
  auto future = std::async(std::launch::async, [read]() mutable {
    std::vector<uint8_t> all;
    std::array<uint8_t, 4096> buf;
    for (;;) {
      asio::error_code ec;
      const size_t n = read(asio::buffer(buf), ec);
      all.insert(all.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
      if (ec) return all;
    }
  });
  bool closedByPeer = true;
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    closedByPeer = false;
    ::shutdown(fd, SHUT_RDWR);
  }
  return {future.get(), closedByPeer};
}

// A TCP socket connected to 127.0.0.1:port from the loopback address `from` (any of 127.0.0.0/8:
// a test can play several hosts). Throws asio::system_error.
inline void connectFrom(asio::ip::tcp::socket& socket, const std::string& from, uint16_t port) {
  socket.open(asio::ip::tcp::v4());
  socket.bind({asio::ip::make_address(from), 0});
  socket.connect({asio::ip::make_address("127.0.0.1"), port});
}

// Whether the server closed `socket` (EOF or reset) before `limit` passed; the socket is shut
// down either way. For bounded "is it dropped" checks, never timing assertions.
inline bool closedByServerWithin(asio::ip::tcp::socket& socket, std::chrono::milliseconds limit) {
  const int fd = socket.native_handle();
  auto future = std::async(std::launch::async, [&socket] {
    std::array<uint8_t, 4096> buf;
    for (;;) {
      asio::error_code ec;
      socket.read_some(asio::buffer(buf), ec);
      if (ec) return;
    }
  });
  const bool closed = future.wait_for(limit) == std::future_status::ready;
  if (!closed) ::shutdown(fd, SHUT_RDWR);
  future.get();
  return closed;
}

// A TLS client that writes raw bytes (for malformed-stream tests), connected from the loopback
// address `from`.
class RawTlsClient {
 public:
  RawTlsClient(uint16_t port, const Identity& identity, const std::string& from = "127.0.0.1")
      : m_context(makeTlsContext(identity, false)), m_stream(m_io, *m_context) {
    connectFrom(m_stream.next_layer(), from, port);
    m_stream.next_layer().set_option(asio::ip::tcp::no_delay(true));  // small frames go at once
    m_stream.handshake(asio::ssl::stream_base::client);
  }
  void write(const std::vector<uint8_t>& bytes) { asio::write(m_stream, asio::buffer(bytes)); }
  // Writes what it can; false once the server has closed or reset the connection.
  bool tryWrite(const std::vector<uint8_t>& bytes) {
    asio::error_code ec;
    asio::write(m_stream, asio::buffer(bytes), ec);
    return !ec;
  }
  // The socket's descriptor, for a watchdog that shuts it down from another thread.
  int fd() { return m_stream.lowest_layer().native_handle(); }
  // The next whole frame from the server, or nothing when it closes first.
  std::optional<Message> readMessage() {
    for (;;) {
      if (auto m = m_decoder.next()) return m;
      std::array<uint8_t, 4096> buf;
      asio::error_code ec;
      const size_t n = m_stream.read_some(asio::buffer(buf), ec);
      if (n > 0) m_decoder.feed(std::span<const uint8_t>(buf.data(), n));
      if (ec && !m_decoder.pendingMessages()) return std::nullopt;
    }
  }
  std::pair<std::vector<uint8_t>, bool> readUntilClosed() {
    auto* stream = &m_stream;
    return test::readUntilClosed(
        [stream](asio::mutable_buffer b, asio::error_code& ec) { return stream->read_some(b, ec); },
        m_stream.lowest_layer().native_handle());
  }

 private:
  asio::io_context m_io;
  std::shared_ptr<asio::ssl::context> m_context;
  asio::ssl::stream<asio::ip::tcp::socket> m_stream;
  FrameDecoder m_decoder;
};

// One pairing attempt with a wrong code from the loopback address `from`, played to its end: a
// well-formed pair_start, then, if the server runs the exchange (pair_reply), a wrong
// confirmation, so that the server has counted the failure when this returns. Returns the
// server's first reply (pair_reply, or refused naming why), or nothing when it hung up.
inline std::optional<Message> wrongPairingAttempt(uint16_t port, const Identity& identity,
                                                  const std::string& from) {
  auto hex = [](std::span<const uint8_t> bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (uint8_t b : bytes) {
      out += kDigits[b >> 4];
      out += kDigits[b & 15];
    }
    return out;
  };
  RawTlsClient raw(port, identity, from);
  Spake2 guess(Spake2::Role::A, "2222WRNG", std::vector<uint8_t>(32, 1),
               std::vector<uint8_t>(32, 2), "shoal pairing v1");
  Message start;
  start.control = {{"op", ops::kPairStart}, {"name", "guesser"}, {"share", hex(guess.share())}};
  raw.write(encodeFrame(start));
  std::optional<Message> reply = raw.readMessage();
  if (reply && reply->control.value("op", "") == ops::kPairReply) {
    Message confirm;
    confirm.control = {{"op", ops::kPairConfirm}, {"confirm", std::string(64, '0')}};
    raw.write(encodeFrame(confirm));
    raw.readMessage();  // the refusal, sent once the failure is counted
  }
  return reply;
}

}  // namespace shoal::lan::test
