#pragma once
// Pairing: two nodes that do not trust each other yet become mutually trusted when a person types
// the short code one of them shows (Listener::setPairingCode) into the other (pairWith). The code
// runs through SPAKE2 (spake2.h) inside the TLS connection, bound to both certificates, so a wrong
// code, an eavesdropper or a man in the middle with its own certificate learns nothing usable.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

// Codes are 8 characters from a 32-symbol alphabet without look-alikes (no 0/O, 1/I):
// 40 bits, shown as "ABCD-EFGH".
inline constexpr const char* kPairingAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
inline constexpr int kPairingCodeLength = 8;
// Failed exchanges in all after which a code is burnt (attempts in flight count). Each exchange is
// one online guess at a 40-bit code, so the chance that a code falls to guessing before it burns is
// at most 256 / 2^40 = 2^-32 (about 2.3e-10). High enough that burning a code takes many
// addresses at once (see kPairingBackoffBase), low enough that guessing stays hopeless.
inline constexpr int kPairingMaxFailures = 256;
// After its n-th failed exchange a source address waits kPairingBackoffBase * 2^(n-1), at most
// kPairingBackoffMax, before its next one: a person who mistypes retries after 1, 2, 4 s; one host
// gets 9 attempts in a 5-minute code's life (at 0, 1, 3, 7, ... 255 s), so burning a code within
// its life takes about 256 / 9 = 29 addresses attacking together.
inline constexpr std::chrono::seconds kPairingBackoffBase{1};
inline constexpr std::chrono::seconds kPairingBackoffMax{300};
// A source's failures are forgotten this long after its last one (a person who pairs tomorrow
// starts afresh).
inline constexpr std::chrono::minutes kPairingForgetFailuresAfter{15};
// Source addresses whose failures are remembered at once; beyond, the oldest is forgotten.
inline constexpr size_t kMaxPairingSources = 1024;

// A new random code (RAND_bytes), formatted "ABCD-EFGH". Throws shoal::Error without randomness.
std::string generatePairingCode();

// The 8 code characters as typed by a person: case folded, dashes and spaces dropped. Throws
// shoal::Error naming the bad character or the wrong length.
std::string normalizePairingCode(const std::string& text);

// Connects to host:port (whose Listener has a pairing code set), runs the pairing exchange with
// `code` and, on success, adds the peer to `trust` under the name it gave and returns its device
// ID; the peer has added us under `myName`. Everything within `timeout`.
// Throws TransportError(Auth) when the code is wrong (or someone is in the middle) or the peer
// has no active code (expired, burnt, or already used: the peer does not say which, so the message
// is the same), when the peer refuses because this address must wait after failed attempts
// (kPairingBackoffBase); Timeout; Io.
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
