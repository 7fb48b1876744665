#include "lan/transport/pairing.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "engine/error.h"
#include "lan/discovery/display_name.h"
#include "lan/transport/pairing_gate.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/spake2.h"
#include "lan/transport/tls_connection.h"

namespace shoal::lan {

namespace {

// Additional data bound into the confirmation keys: the protocol and its version.
constexpr const char* kPairingAad = "shoal pairing v1";
constexpr size_t kMaxHexField = 2 * 65;  // the largest field is a 65-byte point

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

// The peer's name as it goes into trusted.json and onto screens: one safe, bounded line
// (display_name.h), whatever the unauthenticated peer sent.
std::string nameField(const nlohmann::json& control) {
  const auto it = control.find("name");
  if (it == control.end() || !it->is_string()) return "";
  return sanitizeDisplayText(it->get_ref<const std::string&>(), kMaxDisplayNameBytes);
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
  // The name as the peer will store it anyway (one bounded line): keeps pair_start small.
  start.control = {{"op", ops::kPairStart},
                   {"name", sanitizeDisplayText(myName, kMaxDisplayNameBytes)},
                   {"share", toHex(spake.share())}};
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
                             " failed: wrong code, or no code active there (expired, used or "
                             "burnt; show a new one), or a man in the middle; nothing was trusted");
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
  m_expires = Clock::now() + validFor;
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
  return !m_code.empty() && Clock::now() < m_expires &&
         m_failures + m_inFlight < kPairingMaxFailures;
}

void PairingGate::forgetOldSources(Clock::time_point now) {
  if (m_sources.size() < kMaxPairingSources) return;
  std::erase_if(m_sources, [&](const auto& entry) {
    return !entry.second.inFlight && now - entry.second.lastFailure > kPairingForgetFailuresAfter;
  });
  if (m_sources.size() < kMaxPairingSources) return;
  // Still full (many addresses failing at once): forget the one whose last failure is oldest.
  auto oldest = m_sources.end();
  for (auto it = m_sources.begin(); it != m_sources.end(); ++it) {
    if (it->second.inFlight) continue;
    if (oldest == m_sources.end() || it->second.lastFailure < oldest->second.lastFailure)
      oldest = it;
  }
  if (oldest != m_sources.end()) m_sources.erase(oldest);
}

std::optional<PairingGate::Attempt> PairingGate::claim(const std::string& source,
                                                       std::string& refusal) {
  // The stand-in is drawn before anything is claimed: drawing may throw.
  std::string standIn = normalizePairingCode(generatePairingCode());
  const auto now = Clock::now();
  std::lock_guard lock(m_mutex);
  auto it = m_sources.find(source);
  if (it != m_sources.end() && !it->second.inFlight &&
      now - it->second.lastFailure > kPairingForgetFailuresAfter) {
    m_sources.erase(it);
    it = m_sources.end();
  }
  if (it == m_sources.end()) {
    forgetOldSources(now);
    if (m_sources.size() >= kMaxPairingSources) {  // every remembered source is mid-exchange
      refusal = "too many pairing attempts at once; try again shortly";
      return std::nullopt;
    }
    it = m_sources.emplace(source, Source{}).first;
  }
  Source& from = it->second;
  if (from.inFlight) {
    refusal = "a pairing attempt from " + source + " is already running";
    return std::nullopt;
  }
  if (now < from.retryAt) {
    const auto wait = std::chrono::ceil<std::chrono::seconds>(from.retryAt - now);
    refusal = "too many failed pairing attempts from " + source + "; try again in " +
              std::to_string(wait.count()) + " s";
    return std::nullopt;
  }
  from.inFlight = true;
  Attempt attempt;
  if (!m_code.empty() && now >= m_expires) m_code.clear();
  if (!m_code.empty() && m_failures + m_inFlight < kPairingMaxFailures) {
    ++m_inFlight;
    attempt.code = m_code;
    attempt.real = true;
    attempt.generation = m_generation;
    return attempt;
  }
  // No code can be tried: run the exchange with a stand-in, so the peer cannot tell (see the top).
  // (Should the stand-in equal a code that is burnt or capped, it still cannot succeed: !real.)
  attempt.code = std::move(standIn);
  return attempt;
}

void PairingGate::release(const Attempt& attempt, const std::string& source, bool success) {
  const auto now = Clock::now();
  std::lock_guard lock(m_mutex);
  if (const auto it = m_sources.find(source); it != m_sources.end()) {
    Source& from = it->second;
    from.inFlight = false;
    if (success) {
      m_sources.erase(it);
    } else {
      ++from.failures;
      from.lastFailure = now;
      // 1 s, 2 s, 4 s, ... capped (the shift is bounded so it cannot overflow).
      const int doublings = std::min(from.failures - 1, 16);
      from.retryAt = now + std::min<std::chrono::seconds>(kPairingBackoffBase * (1 << doublings),
                                                          kPairingBackoffMax);
    }
  }
  if (!attempt.real) return;
  --m_inFlight;
  if (attempt.generation != m_generation) return;  // the code was replaced meanwhile
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
                        std::chrono::milliseconds timeout, const std::string& source) {
  auto refuse = [&](const std::string& why) {
    Message refused;
    refused.control = {{"op", ops::kRefused}, {"message", why}};
    conn.send(refused, timeout);
  };
  std::string refusal;
  const std::optional<Attempt> attempt = claim(source, refusal);
  if (!attempt) {
    refuse(refusal);
    return;
  }
  bool released = false;
  try {
    Spake2 spake(Spake2::Role::B, attempt->code, conn.peerCertificateDigest(),
                 certDigest(local.certPem), kPairingAad);
    try {
      spake.finish(hexField(start.control, "share"));
    } catch (const Error& e) {
      throw TransportError(TransportError::Kind::Protocol, e.what());
    }
    Message reply;
    reply.control = {{"op", ops::kPairReply},
                     {"name", sanitizeDisplayText(localName, kMaxDisplayNameBytes)},
                     {"share", toHex(spake.share())},
                     {"confirm", toHex(spake.confirmation())}};
    conn.send(reply, timeout);
    // A client with the wrong code notices at our confirmation and hangs up: that also counts.
    const Message confirm = conn.receive(timeout);
    // A stand-in never succeeds, even if the peer hit it (2^-40): it is no code of ours.
    if (confirm.control["op"] != ops::kPairConfirm ||
        !spake.verifyPeer(hexField(confirm.control, "confirm")) || !attempt->real) {
      released = true;
      release(*attempt, source, false);
      refuse("pairing failed: wrong code");
      return;
    }
    trust.add(conn.peerDeviceId(), nameField(start.control));
    released = true;
    release(*attempt, source, true);
    Message ok;
    ok.control = {{"op", ops::kPairOk}};
    conn.send(ok, timeout);
  } catch (...) {
    if (!released) release(*attempt, source, false);
    throw;
  }
}

}  // namespace shoal::lan
