#include "lan/transport/spake2.h"

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/obj_mac.h>
#include <openssl/sha.h>

#include <cstring>

#include "engine/error.h"

namespace shoal::lan {

namespace {

constexpr const char* kM = "02886e2f97ace46e55ba9dd7242579f2993b64e16ef3dcab95afd497333d8fa12f";
constexpr const char* kN = "03d8bbd6c639c62937b04d997f38c3770719c629d7014d49a24b4f98baa1292b49";
constexpr const char* kPasswordContext = "shoal pairing code v1";
constexpr size_t kScalarBytes = 32;

[[noreturn]] void fail(const std::string& what) { throw Error("SPAKE2: " + what); }

std::vector<uint8_t> hexBytes(const char* hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; hex[i] && hex[i + 1]; i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
  return out;
}

void appendField(std::vector<uint8_t>& tt, std::span<const uint8_t> field) {
  uint64_t n = field.size();
  for (int i = 0; i < 8; ++i) tt.push_back(static_cast<uint8_t>(n >> (8 * i)));
  tt.insert(tt.end(), field.begin(), field.end());
}

std::vector<uint8_t> hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  std::vector<uint8_t> out(32);
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(),
            out.data(), &len) ||
      len != 32)
    fail("HMAC-SHA256 failed");
  return out;
}

}  // namespace

struct Spake2::Ec {
  EC_GROUP* group = nullptr;
  BN_CTX* ctx = nullptr;
  BIGNUM* order = nullptr;
  BIGNUM* w = nullptr;
  BIGNUM* secret = nullptr;  // x (A) or y (B)
  EC_POINT* m = nullptr;
  EC_POINT* n = nullptr;
  ~Ec() {
    EC_POINT_free(m);
    EC_POINT_free(n);
    BN_clear_free(secret);
    BN_clear_free(w);
    BN_free(order);
    BN_CTX_free(ctx);
    EC_GROUP_free(group);
  }
  EC_POINT* decode(std::span<const uint8_t> bytes, const char* what) const {
    EC_POINT* p = EC_POINT_new(group);
    // oct2point rejects encodings that are not on the curve.
    if (!p || EC_POINT_oct2point(group, p, bytes.data(), bytes.size(), ctx) != 1) {
      EC_POINT_free(p);
      fail(std::string(what) + " is not a P-256 point (" + std::to_string(bytes.size()) +
           " bytes)");
    }
    if (EC_POINT_is_at_infinity(group, p)) {
      EC_POINT_free(p);
      fail(std::string(what) + " is the identity element");
    }
    return p;
  }
  std::vector<uint8_t> encode(const EC_POINT* p) const {
    std::vector<uint8_t> out(65);
    if (EC_POINT_point2oct(group, p, POINT_CONVERSION_UNCOMPRESSED, out.data(), out.size(), ctx) !=
        65)
      fail("cannot encode a point");
    return out;
  }
};

Spake2::Spake2(Role role, const std::string& password, std::vector<uint8_t> idA,
               std::vector<uint8_t> idB, std::string aad)
    : m_ec(std::make_unique<Ec>()),
      m_role(role),
      m_idA(std::move(idA)),
      m_idB(std::move(idB)),
      m_aad(std::move(aad)) {
  setUpGroup();
  Ec& ec = *m_ec;
  // w: 512 bits of hash reduced mod n, so the bias of the reduction is negligible (RFC 9382
  // asks for at least 64 bits more than the order).
  std::vector<uint8_t> in(kPasswordContext, kPasswordContext + std::strlen(kPasswordContext));
  in.push_back(0);
  in.insert(in.end(), password.begin(), password.end());
  uint8_t digest[SHA512_DIGEST_LENGTH];
  SHA512(in.data(), in.size(), digest);
  BIGNUM* wide = BN_bin2bn(digest, sizeof digest, nullptr);
  OPENSSL_cleanse(digest, sizeof digest);
  const bool wOk = wide && BN_nnmod(ec.w, wide, ec.order, ec.ctx) == 1;
  BN_clear_free(wide);
  if (!wOk) fail("cannot derive w");
  // Secret scalar uniformly in [1, n).
  do {
    if (BN_priv_rand_range(ec.secret, ec.order) != 1) fail("no randomness for the secret scalar");
  } while (BN_is_zero(ec.secret));
  computeShare();
}

Spake2::Spake2(Role role, std::span<const uint8_t> w, std::span<const uint8_t> secret,
               std::vector<uint8_t> idA, std::vector<uint8_t> idB, std::string aad)
    : m_ec(std::make_unique<Ec>()),
      m_role(role),
      m_idA(std::move(idA)),
      m_idB(std::move(idB)),
      m_aad(std::move(aad)) {
  setUpGroup();
  Ec& ec = *m_ec;
  if (!BN_bin2bn(w.data(), static_cast<int>(w.size()), ec.w) ||
      !BN_bin2bn(secret.data(), static_cast<int>(secret.size()), ec.secret))
    fail("cannot read the given scalars");
  computeShare();
}

void Spake2::setUpGroup() {
  Ec& ec = *m_ec;
  ec.group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
  ec.ctx = BN_CTX_new();
  ec.order = BN_new();
  ec.w = BN_new();
  ec.secret = BN_new();
  if (!ec.group || !ec.ctx || !ec.order || !ec.w || !ec.secret ||
      EC_GROUP_get_order(ec.group, ec.order, ec.ctx) != 1)
    fail("cannot set up P-256");
  const std::vector<uint8_t> mBytes = hexBytes(kM), nBytes = hexBytes(kN);
  ec.m = ec.decode(mBytes, "M");
  ec.n = ec.decode(nBytes, "N");
}

void Spake2::computeShare() {
  Ec& ec = *m_ec;
  EC_POINT* share = EC_POINT_new(ec.group);
  EC_POINT* blind = EC_POINT_new(ec.group);
  const bool ok =
      share && blind && EC_POINT_mul(ec.group, share, ec.secret, nullptr, nullptr, ec.ctx) == 1 &&
      EC_POINT_mul(ec.group, blind, nullptr, m_role == Role::A ? ec.m : ec.n, ec.w, ec.ctx) == 1 &&
      EC_POINT_add(ec.group, share, share, blind, ec.ctx) == 1;
  if (ok) m_share = ec.encode(share);
  EC_POINT_free(share);
  EC_POINT_free(blind);
  if (!ok) fail("cannot compute the public share");
}

Spake2::~Spake2() = default;

void Spake2::finish(std::span<const uint8_t> peerShare) {
  Ec& ec = *m_ec;
  EC_POINT* peer = ec.decode(peerShare, "the peer's share");
  EC_POINT* unblind = EC_POINT_new(ec.group);
  EC_POINT* k = EC_POINT_new(ec.group);
  // K = secret * (peerShare - w * (the peer's blinding point)); cofactor 1 for P-256.
  bool ok = unblind && k &&
            EC_POINT_mul(ec.group, unblind, nullptr, m_role == Role::A ? ec.n : ec.m, ec.w,
                         ec.ctx) == 1 &&
            EC_POINT_invert(ec.group, unblind, ec.ctx) == 1 &&
            EC_POINT_add(ec.group, unblind, peer, unblind, ec.ctx) == 1 &&
            EC_POINT_mul(ec.group, k, nullptr, unblind, ec.secret, ec.ctx) == 1;
  const bool identity = ok && EC_POINT_is_at_infinity(ec.group, k);
  std::vector<uint8_t> kBytes;
  if (ok && !identity) kBytes = ec.encode(k);
  EC_POINT_free(peer);
  EC_POINT_free(unblind);
  EC_POINT_free(k);
  if (!ok) fail("cannot compute K");
  if (identity) fail("K is the identity element (hostile share)");

  std::vector<uint8_t> wBytes(kScalarBytes);
  if (BN_bn2binpad(ec.w, wBytes.data(), static_cast<int>(wBytes.size())) !=
      static_cast<int>(kScalarBytes))
    fail("cannot encode w");
  const std::vector<uint8_t> peerBytes(peerShare.begin(), peerShare.end());
  const std::vector<uint8_t>& pA = m_role == Role::A ? m_share : peerBytes;
  const std::vector<uint8_t>& pB = m_role == Role::A ? peerBytes : m_share;
  std::vector<uint8_t> tt;
  appendField(tt, m_idA);
  appendField(tt, m_idB);
  appendField(tt, pA);
  appendField(tt, pB);
  appendField(tt, kBytes);
  appendField(tt, wBytes);
  OPENSSL_cleanse(wBytes.data(), wBytes.size());
  OPENSSL_cleanse(kBytes.data(), kBytes.size());

  uint8_t hash[SHA256_DIGEST_LENGTH];
  SHA256(tt.data(), tt.size(), hash);
  m_ke.assign(hash, hash + 16);
  const std::vector<uint8_t> ka(hash + 16, hash + 32);
  OPENSSL_cleanse(hash, sizeof hash);

  // HKDF-SHA256 (RFC 5869) with an empty salt (= 32 zero bytes): extract, then one expand block.
  const std::vector<uint8_t> zeroSalt(32, 0);
  const std::vector<uint8_t> prk = hmacSha256(zeroSalt, ka);
  std::vector<uint8_t> info;
  const std::string label = "ConfirmationKeys" + m_aad;
  info.insert(info.end(), label.begin(), label.end());
  info.push_back(1);
  const std::vector<uint8_t> okm = hmacSha256(prk, info);
  const std::vector<uint8_t> kcA(okm.begin(), okm.begin() + 16), kcB(okm.begin() + 16, okm.end());
  const std::vector<uint8_t> cA = hmacSha256(kcA, tt), cB = hmacSha256(kcB, tt);
  m_myConfirm = m_role == Role::A ? cA : cB;
  m_peerConfirm = m_role == Role::A ? cB : cA;
}

bool Spake2::verifyPeer(std::span<const uint8_t> mac) const {
  if (m_peerConfirm.empty() || mac.size() != m_peerConfirm.size()) return false;
  return CRYPTO_memcmp(mac.data(), m_peerConfirm.data(), mac.size()) == 0;
}

}  // namespace shoal::lan
