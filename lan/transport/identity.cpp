#include "lan/transport/identity.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "engine/error.h"
#include "lan/transport/private_files.h"

namespace shoal::lan {

namespace {

constexpr char kBase32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr int kValidityYears = 20;

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(ASN1_INTEGER* p) const { ASN1_INTEGER_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
template <class T>
using Ptr = std::unique_ptr<T, Free>;

std::string bioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

int base32Value(char c) {
  for (int i = 0; i < 32; ++i)
    if (kBase32[i] == c) return i;
  return -1;
}

// Luhn mod N over the base32 alphabet: doubling every second value from the right, digits summed
// in base 32. One check character per 13-character quarter of the ID.
char luhnCheck(std::string_view s) {
  int factor = 2;
  int sum = 0;
  for (size_t i = s.size(); i-- > 0;) {
    int addend = factor * base32Value(s[i]);
    factor = factor == 2 ? 1 : 2;
    addend = addend / 32 + addend % 32;
    sum += addend;
  }
  return kBase32[(32 - sum % 32) % 32];
}

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error("identity: cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Ptr<X509> parseCert(const std::string& pem, const std::string& where) {
  Ptr<BIO> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Ptr<X509> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) throw Error("identity: " + where + " is not a PEM certificate");
  return cert;
}

}  // namespace

std::string formatDeviceId(std::span<const uint8_t> sha256) {
  if (sha256.size() != 32)
    throw Error("device ID: digest of " + std::to_string(sha256.size()) + " bytes, want 32");
  std::string b32;
  uint32_t buffer = 0;
  int bits = 0;
  for (uint8_t byte : sha256) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      b32 += kBase32[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) b32 += kBase32[(buffer << (5 - bits)) & 31];  // 256 bits -> 52 characters
  std::string withChecks;
  for (size_t q = 0; q < 4; ++q) {
    const std::string_view quarter(b32.data() + q * 13, 13);
    withChecks.append(quarter);
    withChecks += luhnCheck(quarter);
  }
  std::string out;
  for (size_t i = 0; i < withChecks.size(); ++i) {
    if (i > 0 && i % 7 == 0) out += '-';
    out += withChecks[i];
  }
  return out;
}

std::string deviceIdFromCertificateDer(std::span<const uint8_t> der) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(der.data(), der.size(), digest);
  return formatDeviceId(digest);
}

std::string deviceIdFromCertificatePem(const std::string& certPem) {
  Ptr<X509> cert = parseCert(certPem, "certificate");
  unsigned char* der = nullptr;
  const int n = i2d_X509(cert.get(), &der);
  if (n <= 0) throw Error("identity: cannot DER-encode the certificate");
  std::string id =
      deviceIdFromCertificateDer(std::span<const uint8_t>(der, static_cast<size_t>(n)));
  OPENSSL_free(der);
  return id;
}

std::vector<uint8_t> deviceIdDigest(const std::string& deviceId) {
  std::string compact;
  for (char c : deviceId) {
    if (c == '-' || c == ' ') continue;
    compact += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  if (compact.size() != 56)
    throw Error("device ID \"" + deviceId + "\": " + std::to_string(compact.size()) +
                " characters without dashes, want 56");
  std::string b32;
  for (size_t q = 0; q < 4; ++q) {
    const std::string_view quarter(compact.data() + q * 14, 13);
    for (char c : quarter)
      if (base32Value(c) < 0)
        throw Error("device ID \"" + deviceId + "\": character '" + std::string(1, c) +
                    "' is not base32");
    if (luhnCheck(quarter) != compact[q * 14 + 13])
      throw Error("device ID \"" + deviceId + "\": check character of group " +
                  std::to_string(q + 1) + " does not match (mistyped?)");
    b32.append(quarter);
  }
  std::vector<uint8_t> out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : b32) {
    buffer = (buffer << 5) | static_cast<uint32_t>(base32Value(c));
    bits += 5;
    if (bits >= 8) {
      out.push_back(static_cast<uint8_t>(buffer >> (bits - 8)));
      bits -= 8;
    }
  }
  out.resize(32);  // the 4 padding bits of the last character carry nothing
  return out;
}

std::string normalizeDeviceId(const std::string& text) {
  return formatDeviceId(deviceIdDigest(text));
}

Identity createIdentity() {
  Ptr<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) throw Error("identity: cannot generate an EC P-256 key");
  Ptr<X509> cert(X509_new());
  if (!cert) throw Error("identity: X509_new failed");
  X509_set_version(cert.get(), 2);  // X.509 v3
  // A random 128-bit positive serial: two certificates of the same name must never collide.
  unsigned char serialBytes[16];
  if (RAND_bytes(serialBytes, sizeof serialBytes) != 1) throw Error("identity: RAND_bytes failed");
  serialBytes[0] &= 0x7f;
  Ptr<BIGNUM> serialBn(BN_bin2bn(serialBytes, sizeof serialBytes, nullptr));
  BN_to_ASN1_INTEGER(serialBn.get(), X509_get_serialNumber(cert.get()));
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -24 * 3600);  // tolerate clock skew
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  static_cast<long>(kValidityYears) * 365 * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("shoal"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
    throw Error("identity: cannot self-sign the certificate");

  Ptr<BIO> certBio(BIO_new(BIO_s_mem()));
  Ptr<BIO> keyBio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(certBio.get(), cert.get()) != 1 ||
      PEM_write_bio_PrivateKey(keyBio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    throw Error("identity: cannot PEM-encode the new identity");
  Identity id;
  id.certPem = bioText(certBio.get());
  id.keyPem = bioText(keyBio.get());
  id.deviceId = deviceIdFromCertificatePem(id.certPem);
  return id;
}

namespace {

// What an identity/ directory may hold besides the pair: temporary files of an interrupted write
// (this version writes into identity.new.*, older ones wrote key.pem.tmp and cert.pem.tmp here).
bool isLeftover(const std::filesystem::path& p) {
  return p.filename().string().find(".tmp") != std::string::npos;
}

// Makes a new identity in `dir` all at once: key and certificate are written and fsynced in a
// fresh private directory beside it, which is renamed into place and its parent fsynced. A crash
// leaves no identity/ at all (and a stray identity.new.*, removed by the next creator) or a
// complete one. Returns
// false when another process created the identity first (then load that one).
bool createIdentityDirectory(const std::filesystem::path& dir, const Identity& id) {
  const std::filesystem::path fresh = uniqueSibling(dir, "new");
  std::error_code ec;
  try {
    createPrivateDirectories(fresh);
    writeNewFileSynced(fresh / "key.pem", id.keyPem, kPrivateFileMode);
    // The certificate is public (it is sent in every handshake); the directory keeps it private
    // anyway.
    writeNewFileSynced(fresh / "cert.pem", id.certPem, 0644);
    syncDirectory(fresh);
  } catch (const Error& e) {
    std::filesystem::remove_all(fresh, ec);
    throw Error(std::string("identity: ") + e.what());
  }
  // rename(2) replaces an empty directory and fails on a non-empty one: exactly one of two
  // processes creating the identity at once wins.
  if (::rename(fresh.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    std::filesystem::remove_all(fresh, ec);
    if (err == ENOTEMPTY || err == EEXIST) return false;
    throw Error("identity: cannot rename " + fresh.string() + " to " + dir.string() + ": " +
                std::strerror(err));
  }
  syncDirectory(dir.parent_path());
  return true;
}

}  // namespace

Identity loadOrCreateIdentity(const std::filesystem::path& configDir) {
  const std::filesystem::path dir = configDir / "identity";
  const std::filesystem::path certPath = dir / "cert.pem";
  const std::filesystem::path keyPath = dir / "key.pem";
  std::error_code ec;
  bool haveCert = std::filesystem::exists(certPath, ec);
  bool haveKey = std::filesystem::exists(keyPath, ec);
  if (haveCert != haveKey) {
    // The two looks above are not one: a creator may have renamed its finished directory into
    // place between them (key.pem seen, cert.pem not yet). Creators rename under the lock on the
    // config directory, so once we hold it the files say what is really there.
    try {
      ExclusiveLock settled(configDir);
      haveCert = std::filesystem::exists(certPath, ec);
      haveKey = std::filesystem::exists(keyPath, ec);
    } catch (const Error&) {
      haveCert = std::filesystem::exists(certPath, ec);  // no lock (a read-only directory): look
      haveKey = std::filesystem::exists(keyPath, ec);    // once more all the same
    }
  }
  if (!haveCert && !haveKey) {
    try {
      createPrivateDirectories(configDir);
    } catch (const Error& e) {
      throw Error(std::string("identity: ") + e.what());
    }
    // One creator at a time (other processes on this config dir, other threads): the lock is
    // on the config directory itself, so no lock file is left behind.
    std::optional<ExclusiveLock> lock;
    try {
      lock.emplace(configDir);
    } catch (const Error& e) {
      throw Error(std::string("identity: ") + e.what());
    }
    // Another creator finished while we waited: load its identity.
    if (std::filesystem::exists(certPath, ec) || std::filesystem::exists(keyPath, ec)) {
      lock.reset();
      return loadOrCreateIdentity(configDir);
    }
    // What a creator that crashed left beside it (never renamed into place, so never used).
    for (const auto& entry : std::filesystem::directory_iterator(configDir, ec)) {
      if (entry.path().filename().string().starts_with("identity.new."))
        std::filesystem::remove_all(entry.path(), ec);
    }
    // An identity/ without either file never held an identity that was handed out (both files
    // exist before any device ID is shown); what an interrupted write left in it can go.
    if (std::filesystem::is_directory(dir, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (!isLeftover(entry.path()))
          throw Error("identity: " + dir.string() + " holds " + entry.path().filename().string() +
                      " but no key.pem or cert.pem; move it away to create a new identity");
      }
      std::filesystem::remove_all(dir, ec);
      if (ec) throw Error("identity: cannot clear " + dir.string() + ": " + ec.message());
    }
    Identity id = createIdentity();
    if (createIdentityDirectory(dir, id)) return id;
    // Another process (of an older version, which takes no lock) won: load its identity.
  } else if (haveCert != haveKey) {
    // No automatic repair: a key alone cannot give back the certificate, so the device ID the
    // coordinators trust is gone either way, and we cannot tell an interrupted first start
    // (nothing ever paired) from a lost file (paired devices would silently see a new machine).
    const std::filesystem::path& present = haveKey ? keyPath : certPath;
    const std::filesystem::path& missing = haveKey ? certPath : keyPath;
    throw Error("identity: " + present.string() + " exists but " + missing.string() +
                " does not (an interrupted first start, or a deleted file); restore " +
                missing.filename().string() + " from a backup, or move " + dir.string() +
                " away to start with a new device ID (paired devices must pair again)");
  }
  // Written by an older version under a 022 umask: the key was 0600 but its directory 0755.
  tightenMode(dir, kPrivateDirMode);
  tightenMode(keyPath, kPrivateFileMode);
  Identity id;
  id.certPem = readFile(certPath);
  id.keyPem = readFile(keyPath);
  if (id.certPem.empty())
    throw Error("identity: " + certPath.string() + " is empty; restore it from a backup, or move " +
                dir.string() + " away to start with a new device ID");
  if (id.keyPem.empty())
    throw Error("identity: " + keyPath.string() + " is empty; restore it from a backup, or move " +
                dir.string() + " away to start with a new device ID");
  Ptr<X509> cert = parseCert(id.certPem, certPath.string());
  Ptr<BIO> keyBio(BIO_new_mem_buf(id.keyPem.data(), static_cast<int>(id.keyPem.size())));
  Ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(keyBio.get(), nullptr, nullptr, nullptr));
  if (!key) throw Error("identity: " + keyPath.string() + " is not a PEM private key");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    throw Error("identity: " + keyPath.string() + " does not belong to " + certPath.string());
  id.deviceId = deviceIdFromCertificatePem(id.certPem);
  return id;
}

}  // namespace shoal::lan
