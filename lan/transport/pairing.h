#pragma once
// Pairing: two nodes that do not trust each other yet become mutually trusted when a person types
// the short code one of them shows (Listener::setPairingCode) into the other (pairWith). The code
// runs through SPAKE2 (spake2.h) inside the TLS connection, bound to both certificates, so a wrong
// code, an eavesdropper or a man in the middle with its own certificate learns nothing usable.

#include <chrono>
#include <cstdint>
#include <string>

#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

// Codes are 8 characters from a 32-symbol alphabet without look-alikes (no 0/O, 1/I):
// 40 bits, shown as "ABCD-EFGH".
inline constexpr const char* kPairingAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
inline constexpr int kPairingCodeLength = 8;
inline constexpr int kPairingMaxFailures = 5;

// A new random code (RAND_bytes), formatted "ABCD-EFGH". Throws shoal::Error without randomness.
std::string generatePairingCode();

// The 8 code characters as typed by a person: case folded, dashes and spaces dropped. Throws
// shoal::Error naming the bad character or the wrong length.
std::string normalizePairingCode(const std::string& text);

// Connects to host:port (whose Listener has a pairing code set), runs the pairing exchange with
// `code` and, on success, adds the peer to `trust` under the name it gave and returns its device
// ID; the peer has added us under `myName`. Everything within `timeout`.
// Throws TransportError(Auth) when the code is wrong (or someone is in the middle), when the
// peer has no active code (expired, burnt by 5 failures, or already used); Timeout; Io.
// Throws shoal::Error when `code` is malformed (nothing is sent then).
std::string pairWith(const std::string& host, uint16_t port, const Identity& identity,
                     TrustStore& trust, const std::string& code, const std::string& myName,
                     std::chrono::milliseconds timeout = std::chrono::seconds(15));

namespace detail {
// pairWith, except that the SPAKE2 transcript binds `transcriptCertPem` as this side's
// certificate while TLS presents `identity`'s. Exists to test that a mismatch (what a man in the
// middle produces) fails; pairWith() is this with transcriptCertPem == identity.certPem.
std::string pairWithBinding(const std::string& host, uint16_t port, const Identity& identity,
                            const std::string& transcriptCertPem, TrustStore& trust,
                            const std::string& code, const std::string& myName,
                            std::chrono::milliseconds timeout);
}  // namespace detail

}  // namespace shoal::lan
