#include "lan/api/bounded_http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "lan/api/bounded_task_queue.h"

namespace shoal::api {
namespace {

// Bytes taken from the socket per recv(): the library reads the head one byte at a time, so this
// buffer is what keeps that from being one system call per byte.
constexpr size_t kReadBufferBytes = 16 * 1024;

int toMillis(time_t sec, time_t usec) {
  return static_cast<int>(
      std::min<long long>(static_cast<long long>(sec) * 1000 + usec / 1000, 1'000'000'000));
}

// A connected socket as cpp-httplib's Stream, as its own SocketStream is (poll with the server's
// timeouts, then recv/send), delivering at most `maxHead` bytes up to and including the head's
// blank line ("\r\n\r\n", the only terminator the library accepts) and `maxBody` after it.
class BoundedSocketStream final : public httplib::Stream {
 public:
  BoundedSocketStream(socket_t sock, int readTimeoutMs, int writeTimeoutMs, size_t maxHead,
                      size_t maxBody)
      : m_sock(sock),
        m_readTimeoutMs(readTimeoutMs),
        m_writeTimeoutMs(writeTimeoutMs),
        m_maxHead(maxHead),
        m_maxBody(maxBody) {}

  bool is_readable() const override { return waitFor(POLLIN, m_readTimeoutMs); }
  bool is_writable() const override { return waitFor(POLLOUT, m_writeTimeoutMs) && isAlive(); }

  ssize_t read(char* ptr, size_t size) override {
    const size_t allowed = m_headDone ? m_maxBody - m_bodyBytes : m_maxHead - m_headBytes;
    if (allowed == 0) return -1;  // over a bound: as if the peer had failed
    if (m_bufferOffset == m_bufferSize) {
      if (!is_readable()) return -1;
      ssize_t n;
      do {
        n = ::recv(m_sock, m_buffer, sizeof m_buffer, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      m_bufferOffset = 0;
      m_bufferSize = static_cast<size_t>(n);
    }
    const size_t n = std::min({size, allowed, m_bufferSize - m_bufferOffset});
    std::memcpy(ptr, m_buffer + m_bufferOffset, n);
    m_bufferOffset += n;
    account(std::string_view(ptr, n));
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(m_sock, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return m_sock; }

 private:
  bool waitFor(short events, int timeoutMs) const {
    pollfd p{m_sock, events, 0};
    int r;
    do {
      r = ::poll(&p, 1, timeoutMs);
    } while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & events) != 0;
  }

  // False once the peer has closed: readable with nothing to read (what the library's
  // is_socket_alive checks, so a streaming reply stops when its client has gone).
  bool isAlive() const {
    if (!waitFor(POLLIN, 0)) return true;
    char byte;
    return ::recv(m_sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (get(m_sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char host[NI_MAXHOST];
    char serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  // Counts what was delivered, finding the end of the head.
  void account(std::string_view bytes) {
    static constexpr std::string_view kHeadEnd = "\r\n\r\n";
    size_t i = 0;
    for (; i < bytes.size() && !m_headDone; ++i) {
      ++m_headBytes;
      const char c = bytes[i];
      m_headEndMatched = c == kHeadEnd[m_headEndMatched] ? m_headEndMatched + 1 : c == '\r' ? 1 : 0;
      m_headDone = m_headEndMatched == kHeadEnd.size();
    }
    m_bodyBytes += bytes.size() - i;
  }

  socket_t m_sock;
  int m_readTimeoutMs;
  int m_writeTimeoutMs;
  size_t m_maxHead;
  size_t m_maxBody;
  bool m_headDone = false;
  size_t m_headEndMatched = 0;  // how much of "\r\n\r\n" the last bytes matched
  size_t m_headBytes = 0;
  size_t m_bodyBytes = 0;
  char m_buffer[kReadBufferBytes];
  size_t m_bufferOffset = 0;
  size_t m_bufferSize = 0;
};

// The library deletes the queue new_task_queue gives it when its accept loop ends, while
// stopServing() may need it from another thread at that moment: the library gets this handle, and
// the server keeps a share of the queue itself.
class SharedTaskQueue final : public httplib::TaskQueue {
 public:
  explicit SharedTaskQueue(std::shared_ptr<BoundedTaskQueue> tasks) : m_tasks(std::move(tasks)) {}
  void enqueue(std::function<void()> task) override { m_tasks->enqueue(std::move(task)); }
  void shutdown() override { m_tasks->shutdown(); }

 private:
  std::shared_ptr<BoundedTaskQueue> m_tasks;
};

}  // namespace

BoundedHttpServer::BoundedHttpServer(size_t maxHeadBytes, size_t maxBodyBytes, size_t threads,
                                     size_t maxPending)
    : m_maxHeadBytes(maxHeadBytes), m_maxBodyBytes(maxBodyBytes) {
  new_task_queue = [this, threads, maxPending]() -> httplib::TaskQueue* {
    auto tasks = std::make_shared<BoundedTaskQueue>(threads, maxPending);
    std::lock_guard lock(m_tasksMutex);
    if (m_stopping) tasks->stopWaiting();
    m_tasks = tasks;
    return new SharedTaskQueue(std::move(tasks));
  };
}

void BoundedHttpServer::stopServing() {
  // The listening socket first: once the woken accept loop looks again, it sees it closed and
  // ends, rather than accepting more without a bound.
  stop();
  std::lock_guard lock(m_tasksMutex);
  m_stopping = true;
  if (m_tasks) m_tasks->stopWaiting();
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  BoundedSocketStream stream(sock, toMillis(read_timeout_sec_, read_timeout_usec_),
                             toMillis(write_timeout_sec_, write_timeout_usec_), m_maxHeadBytes,
                             m_maxBodyBytes);
  bool connectionClosed = false;
  const bool ok = svr_sock_ != INVALID_SOCKET &&
                  process_request(stream, /*close_connection=*/true, connectionClosed, nullptr);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace shoal::api
