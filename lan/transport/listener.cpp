#include "lan/transport/listener.h"

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <deque>
#include <list>
#include <mutex>
#include <system_error>
#include <thread>

#include "engine/error.h"
#include "lan/transport/pairing_gate.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/tls_connection.h"
#include "lan/transport/tls_context.h"
#include "lan/transport/vetting_slots.h"

namespace shoal::lan {

namespace {

// How long the listener waits before accepting again after accept failed (out of descriptors,
// most likely): long enough not to spin, short enough that a coordinator barely notices.
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

void sendRefusal(TlsConnection& conn, const std::string& why, std::chrono::milliseconds timeout) {
  Message refused;
  refused.control = {{"op", ops::kRefused}, {"message", why}};
  conn.send(refused, timeout);
}

}  // namespace

struct Listener::Impl {
  // One connection being vetted on its own thread.
  struct Vetting {
    std::thread thread;
    TlsConnection* conn = nullptr;  // for stop() to close it; null once handed over or dropped
    VettingSlots::Slot slot;
    bool slotHeld = true;  // until handed over or closed (guarded by mutex)
    std::chrono::steady_clock::time_point accepted;
    std::atomic<bool> done{false};
  };

  Impl(const Identity& id, TrustStore& t, OnConnection cb)
      : identity(id),
        trust(t),
        onConnection(std::move(cb)),
        tlsContext(makeTlsContext(id, true)),
        work(asio::make_work_guard(io)),
        acceptor(io),
        acceptRetry(io) {}

  void startAccept();
  // Admits an accepted socket to vetting, or closes it when the slots are taken (vetting_slots.h).
  void admit(asio::ip::tcp::socket socket);
  void vet(Vetting& v, std::unique_ptr<TlsConnection> conn);
  void releaseSlot(Vetting& v);  // mutex held
  void reapFinished();

  const Identity identity;
  TrustStore& trust;
  const OnConnection onConnection;
  std::shared_ptr<asio::ssl::context> tlsContext;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer acceptRetry;  // the pause after a failed accept
  std::thread ioThread;
  uint16_t port = 0;
  PairingGate pairing;

  std::mutex mutex;  // guards the fields below
  std::list<Vetting> vetting;
  VettingSlots slots;
  std::deque<std::string> selfProbes;  // newest last, at most kMaxRememberedSelfProbes
  std::string localName = "shoal";
  std::function<bool(const std::string&)> introduced;  // setIntroduced (guarded by mutex)
  std::chrono::milliseconds handshakeTimeout{10000};
  bool stopping = false;
};

void Listener::Impl::startAccept() {
  // Accept into a plain socket of our own io_context: a connection closed on arrival costs no
  // thread; an admitted one moves into a TlsConnection with its own io thread.
  acceptor.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stop()
    if (!ec) admit(std::move(socket));
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
    }
    if (!ec) {
      startAccept();
      return;
    }
    // Out of descriptors (EMFILE, ENFILE) or the like: accepting again at once fails again at
    // once, a busy loop at full CPU. Wait a little for descriptors to come back.
    acceptRetry.expires_after(kAcceptRetryDelay);
    acceptRetry.async_wait([this](const asio::error_code& waitError) {
      if (waitError == asio::error::operation_aborted) return;  // stop()
      {
        std::lock_guard lock(mutex);
        if (stopping) return;
      }
      startAccept();
    });
  });
}

void Listener::Impl::admit(asio::ip::tcp::socket socket) {
  asio::error_code ec;
  const asio::ip::tcp::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  const std::string source = sourceKey(remote.address());
  const std::string prefix = prefixKey(remote.address());
  std::lock_guard lock(mutex);
  if (stopping) return;
  reapFinished();
  std::optional<VettingSlots::Slot> slot = slots.admit(source, prefix);
  if (!slot) return;  // `socket` closes here
  std::unique_ptr<TlsConnection> conn;
  try {
    // The connection's own io_context takes descriptors (epoll, eventfd): a node out of them
    // right after accept() drops this connection (asio throws), it does not go down.
    conn = std::make_unique<TlsConnection>(tlsContext);
    conn->adoptAccepted(std::move(socket));
  } catch (const std::exception&) {
    slots.release(*slot);
    return;
  }
  Vetting& v = vetting.emplace_back();
  v.conn = conn.get();
  v.slot = std::move(*slot);
  v.accepted = std::chrono::steady_clock::now();
  try {
    v.thread = std::thread([this, &v, c = std::move(conn)]() mutable { vet(v, std::move(c)); });
  } catch (const std::system_error&) {
    // No thread to be had (a process or cgroup limit): the lambda, and the connection it
    // holds, are gone already; drop the entry.
    releaseSlot(v);
    vetting.pop_back();
  }
}

void Listener::Impl::releaseSlot(Vetting& v) {
  if (!v.slotHeld) return;
  v.slotHeld = false;
  slots.release(v.slot);
}

void Listener::Impl::vet(Vetting& v, std::unique_ptr<TlsConnection> conn) {
  std::chrono::milliseconds timeout;
  std::string name;
  std::function<bool(const std::string&)> isIntroduced;
  {
    std::lock_guard lock(mutex);
    timeout = handshakeTimeout;
    name = localName;
    isIntroduced = introduced;
  }
  // The handshake and the first frame share one deadline from the accept: a slow-loris peer that
  // trickles its handshake gets no fresh timeout per step.
  using Clock = std::chrono::steady_clock;
  const auto deadline = v.accepted + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  try {
    conn->awaitClientHello(std::min(kClientHelloTimeout, timeout));
    conn->serverHandshake(remaining());
    const Message first = conn->receive(remaining());
    // Our own certificate: a connection from this node to itself (a clash check that a relay led
    // back here). Recorded before any reply, so the prober can ask once it has one.
    if (conn->peerDeviceId() == identity.deviceId) {
      const auto probe = first.control.find("probe");
      if (probe != first.control.end() && probe->is_string()) {
        std::lock_guard lock(mutex);
        selfProbes.push_back(probe->get<std::string>().substr(0, 64));
        if (selfProbes.size() > kMaxRememberedSelfProbes) selfProbes.pop_front();
      }
    }
    const std::string op = first.control["op"].get<std::string>();
    if (op == ops::kHello) {
      if (trust.isTrusted(conn->peerDeviceId()) ||
          (isIntroduced && isIntroduced(conn->peerDeviceId()))) {
        // Known from here on, before the welcome: once the peer holds it, its next connection
        // must find the reserved slots (it may open one at once, before this thread runs on).
        {
          std::lock_guard lock(mutex);
          slots.rememberTrusted(v.slot.source);
        }
        conn->enterSession();  // before the welcome: the peer's next frame is a session frame
        Message welcome;
        welcome.control = {{"op", ops::kWelcome}, {"device_id", identity.deviceId}};
        conn->send(welcome, timeout);
        {
          std::lock_guard lock(mutex);
          v.conn = nullptr;
          releaseSlot(v);
        }
        onConnection(std::move(conn));
      } else {
        sendRefusal(*conn,
                    "device " + conn->peerDeviceId() + " is not trusted by " + identity.deviceId +
                        " (pair first)",
                    timeout);
      }
    } else if (op == ops::kPairStart) {
      pairing.serve(*conn, first, identity, name, trust, timeout, v.slot.source);
    } else {
      sendRefusal(*conn, "expected \"hello\" or \"pair_start\", got \"" + op + "\"", timeout);
    }
  } catch (const std::exception&) {
    // A client that fails the handshake, stalls or misbehaves is simply dropped.
  }
  {
    std::lock_guard lock(mutex);
    v.conn = nullptr;
  }
  conn.reset();  // closes (if still ours) and joins its io thread
  {
    // Only now: the slot bounds threads, and the connection's io thread has just ended.
    std::lock_guard lock(mutex);
    releaseSlot(v);
  }
  v.done = true;
}

void Listener::Impl::reapFinished() {
  for (auto it = vetting.begin(); it != vetting.end();) {
    if (it->done) {
      it->thread.join();
      it = vetting.erase(it);
    } else {
      ++it;
    }
  }
}

Listener::Listener(const std::string& bindHost, uint16_t port, const Identity& identity,
                   TrustStore& trust, OnConnection onConnection)
    : m_impl(std::make_unique<Impl>(identity, trust, std::move(onConnection))) {
  asio::error_code ec;
  const asio::ip::address address = asio::ip::make_address(bindHost, ec);
  if (ec)
    throw TransportError(TransportError::Kind::Io,
                         "listener: \"" + bindHost + "\" is not an IP address");
  const asio::ip::tcp::endpoint endpoint(address, port);
  auto& acceptor = m_impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw TransportError(TransportError::Kind::Io, "listener: cannot listen on " + bindHost + ":" +
                                                       std::to_string(port) + ": " + ec.message());
  m_impl->port = acceptor.local_endpoint().port();
  m_impl->startAccept();
  m_impl->ioThread = std::thread([impl = m_impl.get()] {
    // Handlers catch what they expect; a stray exception must still not take the node down.
    for (;;) {
      try {
        impl->io.run();
        return;
      } catch (const std::exception&) {
      }
    }
  });
}

Listener::~Listener() { stop(); }

uint16_t Listener::port() const { return m_impl->port; }

void Listener::setPairingCode(std::string code, std::chrono::seconds validFor) {
  m_impl->pairing.setCode(code, validFor);
}

void Listener::clearPairingCode() { m_impl->pairing.clear(); }

bool Listener::pairingCodeActive() const { return m_impl->pairing.active(); }

bool Listener::sawSelfProbe(const std::string& token) const {
  std::lock_guard lock(m_impl->mutex);
  const auto& seen = m_impl->selfProbes;
  return !token.empty() && std::find(seen.begin(), seen.end(), token) != seen.end();
}

void Listener::setLocalName(std::string name) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->localName = std::move(name);
}

void Listener::setIntroduced(std::function<bool(const std::string& deviceId)> introduced) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->introduced = std::move(introduced);
}

void Listener::setHandshakeTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(m_impl->mutex);
  m_impl->handshakeTimeout = timeout;
}

void Listener::stop() {
  Impl& impl = *m_impl;
  std::list<Impl::Vetting> vetting;
  {
    std::lock_guard lock(impl.mutex);
    if (impl.stopping) return;
    impl.stopping = true;
    for (auto& v : impl.vetting)
      if (v.conn) v.conn->close();
    vetting.splice(vetting.begin(), impl.vetting);  // list nodes stay put: threads keep &v
  }
  asio::post(impl.io, [&impl] {
    asio::error_code ignored;
    impl.acceptor.close(ignored);
    impl.acceptRetry.cancel();
  });
  impl.work.reset();
  if (impl.ioThread.joinable()) impl.ioThread.join();
  // Without the mutex held: a vetting thread takes it at the hand-over.
  for (auto& v : vetting) v.thread.join();
}

}  // namespace shoal::lan
