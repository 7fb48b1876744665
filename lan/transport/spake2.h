#pragma once
// SPAKE2 (RFC 9382) over P-256 with SHA-256, HKDF-SHA256 and HMAC-SHA256: the pairing code
// becomes a strong shared key, and each side proves it holds the same key with a MAC over the
// whole transcript. A passive eavesdropper learns nothing to test codes against offline; an
// active attacker gets one guess per exchange (which the Listener limits to 5 per code).
//
// Identities A and B (bound into the transcript) are the SHA-256 fingerprints of the client's and
// the server's TLS certificates as each side saw them; a man in the middle who terminates TLS with
// its own certificate therefore makes the two transcripts differ and the confirmations fail.
//
// Role A is the client (sends pA = x*P + w*M), role B the server (pB = y*P + w*N).
// M, N: the RFC 9382 section 6 P-256 points (compressed SEC1):
//   M = 02886e2f97ace46e55ba9dd7242579f2993b64e16ef3dcab95afd497333d8fa12f
//   N = 03d8bbd6c639c62937b04d997f38c3770719c629d7014d49a24b4f98baa1292b49
// Transcript (RFC 9382 section 3.3), each field preceded by its length as 8 bytes little endian:
//   TT = A, B, pA, pB, K, w   (points as uncompressed SEC1, w as 32 bytes big endian)
//   Ke || Ka = SHA-256(TT)    (16 bytes each)
//   KcA || KcB = HKDF-SHA256(salt = none, ikm = Ka, info = "ConfirmationKeys" || AAD, 32 bytes)
//   cA = HMAC(KcA, TT), cB = HMAC(KcB, TT)
// w = SHA-512("shoal pairing code v1" || 0 || code) mod n (the code is random and only ever
// tested online, so a slow hash would add nothing).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace shoal::lan {

class Spake2 {
 public:
  enum class Role { A, B };

  // Throws shoal::Error when OpenSSL fails (no randomness).
  Spake2(Role role, const std::string& password, std::vector<uint8_t> idA, std::vector<uint8_t> idB,
         std::string aad);
  // Known-answer tests only (RFC 9382 Appendix B): w and the secret scalar given as big-endian
  // bytes instead of derived from a password and drawn at random.
  Spake2(Role role, std::span<const uint8_t> w, std::span<const uint8_t> secret,
         std::vector<uint8_t> idA, std::vector<uint8_t> idB, std::string aad);
  ~Spake2();
  Spake2(const Spake2&) = delete;
  Spake2& operator=(const Spake2&) = delete;

  // This side's public share (pA or pB), 65 bytes.
  const std::vector<uint8_t>& share() const { return m_share; }

  // Takes the other side's share and derives the keys. Throws shoal::Error when the share is not a
  // point of the curve, is the identity, or yields the identity as K.
  void finish(std::span<const uint8_t> peerShare);

  // After finish(): this side's key confirmation MAC (cA for A, cB for B), 32 bytes.
  const std::vector<uint8_t>& confirmation() const { return m_myConfirm; }
  // After finish(): whether `mac` is the other side's correct confirmation (constant time).
  bool verifyPeer(std::span<const uint8_t> mac) const;
  // After finish() (and, to be meaningful, a verified peer confirmation): Ke.
  const std::vector<uint8_t>& sharedKey() const { return m_ke; }

 private:
  void setUpGroup();
  void computeShare();

  struct Ec;
  std::unique_ptr<Ec> m_ec;
  Role m_role;
  std::vector<uint8_t> m_idA, m_idB;
  std::string m_aad;
  std::vector<uint8_t> m_share;
  std::vector<uint8_t> m_myConfirm, m_peerConfirm, m_ke;
};

}  // namespace shoal::lan
