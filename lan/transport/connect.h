#pragma once
// Opening a connection to a trusted peer node.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "lan/transport/connection.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

// Connects to host:port over TLS 1.3 presenting `identity`, checks that the server's device ID is
// in `trust` (before sending it anything), then asks to open a session; returns once the server
// has accepted us too. Everything happens within `timeout`.
// Throws TransportError: Auth when the server is not trusted here, when it refuses us (message
// names the reason, e.g. not paired), or when TLS fails; Timeout; Io (resolve/connect).
std::unique_ptr<Connection> connectTo(const std::string& host, uint16_t port,
                                      const Identity& identity, const TrustStore& trust,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace shoal::lan
