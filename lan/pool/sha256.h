#pragma once
// SHA-256 (OpenSSL) as lowercase hex: model identity and weight-chunk verification.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace shoal::lan {

std::string sha256Hex(std::span<const uint8_t> bytes);
// Of a whole file, read in blocks; throws shoal::Error when it cannot be read.
std::string sha256FileHex(const std::filesystem::path& path);

}  // namespace shoal::lan
