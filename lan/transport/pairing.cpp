#include "lan/transport/pairing.h"

#include <openssl/rand.h>

#include <cctype>
#include <cstring>

#include "engine/error.h"
#include "lan/transport/pairing_gate.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/spake2.h"
#include "lan/transport/tls_connection.h"

namespace shoal::lan {

namespace {

// Additional data bound into the confirmation keys: the protocol and its version.
constexpr const char* kPairingAad = "shoal pairing v1";
constexpr size_t kMaxHexField = 2 * 65;  // the largest field is a 65-byte point
constexpr size_t kMaxNameBytes = 256;

std::string toHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// The hex string field `key` of `control`, decoded; throws TransportError(Protocol) naming it.
std::vector<uint8_t> hexField(const nlohmann::json& control, const char* key) {
  const auto it = control.find(key);
  if (it == control.end() || !it->is_string())
    throw TransportError(TransportError::Kind::Protocol,
                         std::string("pairing: \"") + key + "\" missing or not a string");
  const std::string& text = it->get_ref<const std::string&>();
  if (text.size() > kMaxHexField || text.size() % 2 != 0)
    throw TransportError(
        TransportError::Kind::Protocol,
        std::string("pairing: \"") + key + "\" has " + std::to_string(text.size()) + " hex digits");
  std::vector<uint8_t> out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int v = 0;
    for (size_t j = i; j < i + 2; ++j) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(text[j])));
      const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
      if (d < 0)
        throw TransportError(TransportError::Kind::Protocol,
                             std::string("pairing: \"") + key + "\" is not hex");
      v = v * 16 + d;
    }
    out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

std::string nameField(const nlohmann::json& control) {
  const auto it = control.find("name");
  std::string name = (it != control.end() && it->is_string()) ? it->get<std::string>() : "";
  if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
  return name;
}

std::vector<uint8_t> certDigest(const std::string& certPem) {
  return deviceIdDigest(deviceIdFromCertificatePem(certPem));
}

}  // namespace

std::string generatePairingCode() {
  uint8_t random[kPairingCodeLength];
  if (RAND_bytes(random, sizeof random) != 1) throw Error("pairing: RAND_bytes failed");
  std::string code;
  for (int i = 0; i < kPairingCodeLength; ++i) {
    if (i == kPairingCodeLength / 2) code += '-';
    code += kPairingAlphabet[random[i] & 31];  // 32 symbols: the low 5 bits are uniform
  }
  return code;
}

std::string normalizePairingCode(const std::string& text) {
  std::string code;
  for (char raw : text) {
    if (raw == '-' || raw == ' ') continue;
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(raw)));
    if (!std::strchr(kPairingAlphabet, c) || c == 0)
      throw Error("pairing code \"" + text + "\": character '" + std::string(1, raw) +
                  "' is not used in codes (alphabet " + kPairingAlphabet + ")");
    code += c;
  }
  if (code.size() != static_cast<size_t>(kPairingCodeLength))
    throw Error("pairing code \"" + text + "\": " + std::to_string(code.size()) +
                " characters, want " + std::to_string(kPairingCodeLength));
  return code;
}

std::string detail::pairWithBinding(const std::string& host, uint16_t port,
                                    const Identity& identity, const std::string& transcriptCertPem,
                                    TrustStore& trust, const std::string& code,
                                    const std::string& myName, std::chrono::milliseconds timeout) {
  const std::string normalized = normalizePairingCode(code);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  std::unique_ptr<TlsConnection> conn = openTlsClient(host, port, identity, timeout);
  const std::string where = conn->peerAddress();
  Spake2 spake(Spake2::Role::A, normalized, certDigest(transcriptCertPem),
               conn->peerCertificateDigest(), kPairingAad);

  Message start;
  start.control = {{"op", ops::kPairStart}, {"name", myName}, {"share", toHex(spake.share())}};
  conn->send(start, remaining());
  Message reply = conn->receive(remaining());
  auto refusedOr = [&](const Message& m, const char* expected) {
    const std::string op = m.control["op"].get<std::string>();
    if (op == ops::kRefused) {
      const auto msg = m.control.value("message", nlohmann::json("no reason given"));
      throw TransportError(TransportError::Kind::Auth,
                           "pairing with " + where + " refused: " +
                               (msg.is_string() ? msg.get<std::string>() : msg.dump()));
    }
    if (op != expected)
      throw TransportError(
          TransportError::Kind::Protocol,
          "pairing with " + where + ": expected \"" + expected + "\", got \"" + op + "\"");
  };
  refusedOr(reply, ops::kPairReply);
  try {
    spake.finish(hexField(reply.control, "share"));
  } catch (const Error& e) {
    throw TransportError(TransportError::Kind::Protocol, "pairing with " + where + ": " + e.what());
  }
  if (!spake.verifyPeer(hexField(reply.control, "confirm"))) {
    conn->close();
    throw TransportError(TransportError::Kind::Auth,
                         "pairing with " + where +
                             " failed: wrong code (or a man in the middle); nothing was trusted");
  }
  Message confirm;
  confirm.control = {{"op", ops::kPairConfirm}, {"confirm", toHex(spake.confirmation())}};
  conn->send(confirm, remaining());
  refusedOr(conn->receive(remaining()), ops::kPairOk);
  const std::string peerId = conn->peerDeviceId();
  trust.add(peerId, nameField(reply.control));
  return peerId;
}

std::string pairWith(const std::string& host, uint16_t port, const Identity& identity,
                     TrustStore& trust, const std::string& code, const std::string& myName,
                     std::chrono::milliseconds timeout) {
  return detail::pairWithBinding(host, port, identity, identity.certPem, trust, code, myName,
                                 timeout);
}

void PairingGate::setCode(const std::string& code, std::chrono::seconds validFor) {
  const std::string normalized = normalizePairingCode(code);
  std::lock_guard lock(m_mutex);
  m_code = normalized;
  m_expires = std::chrono::steady_clock::now() + validFor;
  m_failures = 0;
  ++m_generation;
}

void PairingGate::clear() {
  std::lock_guard lock(m_mutex);
  m_code.clear();
  ++m_generation;
}

bool PairingGate::active() const {
  std::lock_guard lock(m_mutex);
  // Attempts in flight count: one that has started may still fail, and the client of a wrong
  // code may learn so (and hang up) before this side has counted it.
  return !m_code.empty() && std::chrono::steady_clock::now() < m_expires &&
         m_failures + m_inFlight < kPairingMaxFailures;
}

bool PairingGate::claim(std::string& code, uint64_t& generation, std::string& reason) {
  std::lock_guard lock(m_mutex);
  if (m_code.empty()) {
    reason = "no pairing code is active on this node";
    return false;
  }
  if (std::chrono::steady_clock::now() >= m_expires) {
    m_code.clear();
    reason = "the pairing code has expired";
    return false;
  }
  if (m_failures + m_inFlight >= kPairingMaxFailures) {
    reason = "too many pairing attempts on this code; show a new one";
    return false;
  }
  ++m_inFlight;
  code = m_code;
  generation = m_generation;
  return true;
}

void PairingGate::release(bool success, uint64_t generation) {
  std::lock_guard lock(m_mutex);
  --m_inFlight;
  if (generation != m_generation) return;  // the code was replaced meanwhile
  if (success) {
    m_code.clear();  // single use
    ++m_generation;
    return;
  }
  if (++m_failures >= kPairingMaxFailures) {
    m_code.clear();  // burnt
    ++m_generation;
  }
}

void PairingGate::serve(TlsConnection& conn, const Message& start, const Identity& local,
                        const std::string& localName, TrustStore& trust,
                        std::chrono::milliseconds timeout) {
  auto refuse = [&](const std::string& why) {
    Message refused;
    refused.control = {{"op", ops::kRefused}, {"message", why}};
    conn.send(refused, timeout);
  };
  std::string code, reason;
  uint64_t generation = 0;
  if (!claim(code, generation, reason)) {
    refuse(reason);
    return;
  }
  bool success = false;
  try {
    Spake2 spake(Spake2::Role::B, code, conn.peerCertificateDigest(), certDigest(local.certPem),
                 kPairingAad);
    try {
      spake.finish(hexField(start.control, "share"));
    } catch (const Error& e) {
      throw TransportError(TransportError::Kind::Protocol, e.what());
    }
    Message reply;
    reply.control = {{"op", ops::kPairReply},
                     {"name", localName},
                     {"share", toHex(spake.share())},
                     {"confirm", toHex(spake.confirmation())}};
    conn.send(reply, timeout);
    // A client with the wrong code notices at our confirmation and hangs up: that also counts.
    const Message confirm = conn.receive(timeout);
    if (confirm.control["op"] != ops::kPairConfirm ||
        !spake.verifyPeer(hexField(confirm.control, "confirm"))) {
      release(false, generation);
      generation = ~uint64_t{0};
      refuse("pairing failed: wrong code");
      return;
    }
    trust.add(conn.peerDeviceId(), nameField(start.control));
    success = true;
    release(true, generation);
    generation = ~uint64_t{0};
    Message ok;
    ok.control = {{"op", ops::kPairOk}};
    conn.send(ok, timeout);
  } catch (...) {
    if (!success && generation != ~uint64_t{0}) release(false, generation);
    throw;
  }
}

}  // namespace shoal::lan
