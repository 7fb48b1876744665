#include "lan/transport/connect.h"

#include "lan/transport/session_ops.h"
#include "lan/transport/tls_connection.h"
#include "lan/transport/tls_context.h"

namespace shoal::lan {

std::unique_ptr<TlsConnection> openTlsClient(const std::string& host, uint16_t port,
                                             const Identity& identity,
                                             std::chrono::milliseconds timeout) {
  auto conn = std::make_unique<TlsConnection>(makeTlsContext(identity, false));
  conn->connectAndHandshake(host, port, timeout);
  return conn;
}

std::unique_ptr<Connection> connectTo(const std::string& host, uint16_t port,
                                      const Identity& identity, const TrustStore& trust,
                                      std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  std::unique_ptr<TlsConnection> conn = openTlsClient(host, port, identity, timeout);
  // Pin the server before it sees a single byte of ours beyond the TLS handshake.
  if (!trust.isTrusted(conn->peerDeviceId())) {
    const std::string id = conn->peerDeviceId();
    conn->close();
    throw TransportError(TransportError::Kind::Auth,
                         host + ":" + std::to_string(port) + " presents device ID " + id +
                             ", which this device (" + identity.deviceId +
                             ") does not trust yet: pair with it first");
  }
  // Pinned: from here on the server may send session-sized frames (after its welcome).
  conn->enterSession();
  Message hello;
  hello.control = {{"op", ops::kHello}, {"version", ops::kSessionVersion}};
  conn->send(hello, remaining());
  Message reply = conn->receive(remaining());
  const std::string op = reply.control["op"].get<std::string>();
  if (op == ops::kWelcome) return conn;
  if (op == ops::kRefused) {
    const auto& msg = reply.control.value("message", nlohmann::json("no reason given"));
    throw TransportError(TransportError::Kind::Auth,
                         conn->peerAddress() + " refused the connection: " +
                             (msg.is_string() ? msg.get<std::string>() : msg.dump()));
  }
  throw TransportError(
      TransportError::Kind::Protocol,
      conn->peerAddress() + ": expected \"welcome\" or \"refused\", got \"" + op + "\"");
}

}  // namespace shoal::lan
