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

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/tls_context.h"
#include "lan/transport/trust_store.h"

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

// A TLS client that writes raw bytes (for malformed-stream tests).
class RawTlsClient {
 public:
  RawTlsClient(uint16_t port, const Identity& identity)
      : m_context(makeTlsContext(identity, false)), m_stream(m_io, *m_context) {
    m_stream.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    m_stream.handshake(asio::ssl::stream_base::client);
  }
  void write(const std::vector<uint8_t>& bytes) { asio::write(m_stream, asio::buffer(bytes)); }
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
};

}  // namespace shoal::lan::test
