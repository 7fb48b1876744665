#pragma once
// SHA-256 (OpenSSL EVP) as lowercase hex, for both sides of the node protocol: models are named
// on the wire by the hash of the whole file, streamed tensors are verified by the hash of their
// bytes (the coordinator computes it, the node checks it).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace shoal::lan {

// Incremental hash: update() any number of times, then hexDigest() once.
class Sha256 {
 public:
  Sha256();  // throws shoal::Error when OpenSSL cannot start a digest
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  std::string hexDigest();  // 64 lowercase hex digits; the object is spent afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

std::string sha256Hex(std::span<const uint8_t> bytes);
// Of a whole file, read in blocks; throws shoal::Error naming the file when it cannot be read.
std::string sha256FileHex(const std::filesystem::path& path);

}  // namespace shoal::lan
