#include "lan/discovery/beacon.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

namespace shoal::lan {

namespace {

constexpr uint8_t kMagic[3] = {'S', 'H', 'D'};
constexpr size_t kHeaderBytes = 4;

using Kind = BeaconError::Kind;

bool isDeviceIdChar(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'; }
bool isLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// The field rules shared by encode (our own options) and decode (the network).
void validate(const Beacon& b) {
  if (b.deviceId.empty() || b.deviceId.size() > kMaxDeviceIdChars ||
      !std::all_of(b.deviceId.begin(), b.deviceId.end(), isDeviceIdChar)) {
    throw BeaconError(Kind::Malformed, "beacon field id: '" + b.deviceId.substr(0, 100) +
                                           "' is not 1.." + std::to_string(kMaxDeviceIdChars) +
                                           " characters of A-Z, 0-9, '-'");
  }
  if (b.name.empty() || b.name.size() > kMaxNameBytes) {
    throw BeaconError(Kind::Malformed, "beacon field name: " + std::to_string(b.name.size()) +
                                           " bytes, expected 1.." + std::to_string(kMaxNameBytes));
  }
  if (b.tcpPort == 0) throw BeaconError(Kind::Malformed, "beacon field port: 0 is not a TCP port");
  if (b.nonce.size() != kNonceHexChars ||
      !std::all_of(b.nonce.begin(), b.nonce.end(), isLowerHex)) {
    throw BeaconError(Kind::Malformed, "beacon field nonce: expected " +
                                           std::to_string(kNonceHexChars) +
                                           " lowercase hex digits, got " +
                                           std::to_string(b.nonce.size()) + " characters");
  }
  if (b.summary.size() > kMaxSummaryBytes) {
    throw BeaconError(Kind::Malformed, "beacon field summary: " + std::to_string(b.summary.size()) +
                                           " bytes, at most " + std::to_string(kMaxSummaryBytes));
  }
}

const std::string& requireString(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    throw BeaconError(Kind::Malformed,
                      std::string("beacon field ") + key + ": missing or not a string");
  }
  return it->get_ref<const std::string&>();
}

}  // namespace

std::vector<uint8_t> encodeBeacon(const Beacon& beacon) {
  validate(beacon);
  const nlohmann::json object = {{"id", beacon.deviceId},
                                 {"name", beacon.name},
                                 {"port", beacon.tcpPort},
                                 {"nonce", beacon.nonce},
                                 {"summary", beacon.summary}};
  // Validated strings may still hold invalid UTF-8; replace it rather than throw from dump().
  const std::string text = object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (kHeaderBytes + text.size() > kMaxBeaconBytes) {
    throw BeaconError(Kind::TooLarge, "beacon for " + beacon.deviceId + " encodes to " +
                                          std::to_string(kHeaderBytes + text.size()) +
                                          " bytes, more than " + std::to_string(kMaxBeaconBytes) +
                                          " (shorten the name or summary)");
  }
  std::string framed(reinterpret_cast<const char*>(kMagic), sizeof kMagic);
  framed += static_cast<char>(kBeaconVersion);
  framed += text;
  std::vector<uint8_t> datagram(framed.begin(), framed.end());
  return datagram;
}

Beacon decodeBeacon(std::span<const uint8_t> datagram) {
  if (datagram.size() > kMaxBeaconBytes) {
    throw BeaconError(Kind::TooLarge, "beacon datagram of " + std::to_string(datagram.size()) +
                                          " bytes, more than " + std::to_string(kMaxBeaconBytes));
  }
  if (datagram.size() < kHeaderBytes ||
      !std::equal(std::begin(kMagic), std::end(kMagic), datagram.begin())) {
    throw BeaconError(Kind::BadMagic, "datagram of " + std::to_string(datagram.size()) +
                                          " bytes does not start with the beacon magic \"SHD\"");
  }
  if (datagram[3] != kBeaconVersion) {
    throw BeaconError(Kind::UnsupportedVersion, "beacon version " + std::to_string(datagram[3]) +
                                                    ", this build reads " +
                                                    std::to_string(kBeaconVersion));
  }
  // No exceptions from the parser: a discarded value marks any syntax or UTF-8 error.
  const nlohmann::json object =
      nlohmann::json::parse(datagram.begin() + kHeaderBytes, datagram.end(), nullptr, false);
  if (object.is_discarded() || !object.is_object()) {
    throw BeaconError(Kind::Malformed, "beacon payload (" +
                                           std::to_string(datagram.size() - kHeaderBytes) +
                                           " bytes) is not a JSON object");
  }
  Beacon b;
  b.deviceId = requireString(object, "id");
  b.name = requireString(object, "name");
  b.nonce = requireString(object, "nonce");
  b.summary = requireString(object, "summary");
  const auto port = object.find("port");
  if (port == object.end() || !port->is_number_integer() || port->get<int64_t>() < 1 ||
      port->get<int64_t>() > 65535) {
    throw BeaconError(Kind::Malformed, "beacon field port: missing or not an integer in 1..65535");
  }
  b.tcpPort = static_cast<uint16_t>(port->get<int64_t>());
  validate(b);
  return b;
}

std::string makeBeaconNonce() {
  std::random_device random;  // the OS source (getrandom) on Linux
  static constexpr char kHex[] = "0123456789abcdef";
  std::string nonce;
  while (nonce.size() < kNonceHexChars) {
    uint32_t word = random();
    for (int i = 0; i < 8 && nonce.size() < kNonceHexChars; ++i, word >>= 4) {
      nonce.push_back(kHex[word & 0xF]);
    }
  }
  return nonce;
}

}  // namespace shoal::lan
