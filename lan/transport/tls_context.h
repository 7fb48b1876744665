#pragma once
// Internal: the TLS settings every Shoal connection uses, and how a peer's identity is read off a
// finished handshake. TLS 1.3 only; both sides present their self-signed certificate. The chain
// is not checked against any CA (every certificate is self-signed): the verify callback accepts
// it, and the caller pins the peer afterwards by comparing its device ID with the trust store.

#include <asio/ssl.hpp>
#include <memory>
#include <string>
#include <vector>

#include "lan/transport/identity.h"

namespace shoal::lan {

// A context presenting `identity`, for the server (`server` = true) or the client side.
// Throws TransportError(Auth) when the PEM does not load.
std::shared_ptr<asio::ssl::context> makeTlsContext(const Identity& identity, bool server);

// SHA-256 of the DER of the certificate the peer presented in `ssl`'s finished handshake.
// Throws TransportError(Auth) when the peer presented none.
std::vector<uint8_t> peerCertificateDigest(SSL* ssl);

}  // namespace shoal::lan
