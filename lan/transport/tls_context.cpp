#include "lan/transport/tls_context.h"

#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "lan/transport/connection.h"

namespace shoal::lan {

std::shared_ptr<asio::ssl::context> makeTlsContext(const Identity& identity, bool server) {
  auto ctx = std::make_shared<asio::ssl::context>(server ? asio::ssl::context::tls_server
                                                         : asio::ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(native, TLS1_3_VERSION);
  // No resumption: every connection proves its certificate afresh, and no tickets cross the wire.
  SSL_CTX_set_num_tickets(native, 0);
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET);
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
  asio::error_code ec;
  ctx->use_certificate(asio::buffer(identity.certPem), asio::ssl::context::pem, ec);
  if (!ec) ctx->use_private_key(asio::buffer(identity.keyPem), asio::ssl::context::pem, ec);
  if (ec)
    throw TransportError(TransportError::Kind::Auth,
                         "TLS: cannot load this node's certificate/key: " + ec.message());
  // Ask for (server) / accept (client) the peer's self-signed certificate; pinning happens after
  // the handshake against the trust store, where the reason for a refusal can be reported.
  ctx->set_verify_mode(server ? (asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert)
                              : asio::ssl::verify_peer);
  ctx->set_verify_callback([](bool, asio::ssl::verify_context&) { return true; });
  return ctx;
}

std::vector<uint8_t> peerCertificateDigest(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (!cert)
    throw TransportError(TransportError::Kind::Auth, "TLS: the peer presented no certificate");
  unsigned char* der = nullptr;
  const int n = i2d_X509(cert, &der);
  X509_free(cert);
  if (n <= 0)
    throw TransportError(TransportError::Kind::Auth, "TLS: cannot encode the peer certificate");
  std::vector<uint8_t> digest(SHA256_DIGEST_LENGTH);
  SHA256(der, static_cast<size_t>(n), digest.data());
  OPENSSL_free(der);
  return digest;
}

}  // namespace shoal::lan
