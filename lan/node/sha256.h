#pragma once
// SHA-256 (OpenSSL EVP) for model files and weight tensors: models are named on the wire by the
// hash of the whole file, streamed tensors are verified by the hash of their bytes.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace shoal::lan {

// Incremental hash: update() any number of times, then hexDigest() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  std::string hexDigest();  // 64 lowercase hex digits; the object is spent afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Hash of a whole file, read in blocks. Throws shoal::Error naming the file when it cannot be read.
std::string sha256File(const std::filesystem::path& path);

}  // namespace shoal::lan
