#include "lan/pool/sha256.h"

#include <openssl/evp.h>

#include <fstream>
#include <vector>

#include "engine/error.h"

namespace shoal::lan {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : m_impl(std::make_unique<Impl>()) {
  m_impl->ctx = EVP_MD_CTX_new();
  if (!m_impl->ctx || EVP_DigestInit_ex(m_impl->ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(m_impl->ctx);
    throw Error("SHA-256: OpenSSL could not start a digest");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(m_impl->ctx); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (!bytes.empty() && EVP_DigestUpdate(m_impl->ctx, bytes.data(), bytes.size()) != 1) {
    throw Error("SHA-256: digest update failed");
  }
}

std::string Sha256::hexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(m_impl->ctx, digest, &length) != 1) {
    throw Error("SHA-256: digest final failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

std::string sha256Hex(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hexDigest();
}

std::string sha256FileHex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open to hash");
  Sha256 h;
  std::vector<uint8_t> block(size_t{4} << 20);
  while (in) {
    in.read(reinterpret_cast<char*>(block.data()), static_cast<std::streamsize>(block.size()));
    h.update({block.data(), static_cast<size_t>(in.gcount())});
  }
  if (in.bad()) throw Error(path.string() + ": read error while hashing");
  return h.hexDigest();
}

}  // namespace shoal::lan
