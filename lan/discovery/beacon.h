#pragma once
// The discovery beacon: one UDP datagram saying "a Shoal node with this device ID listens on this
// TCP port". It carries no secret and proves nothing — trust comes from TLS + pairing
// (lan/transport); discovery only saves typing an address.
//
// Wire format, version 1 (at most kMaxBeaconBytes = 1400 bytes, so it fits one Ethernet frame
// with IPv6 + UDP headers and is never fragmented):
//
//   offset 0  "SHD"       magic (3 bytes)
//   offset 3  0x01        protocol version; a receiver drops any other version
//   offset 4  JSON object, UTF-8, no terminator, the rest of the datagram:
//     "id"      string  device ID (transport's formatDeviceId: base32 in dash-separated groups),
//                       1..80 chars of [A-Z0-9-]
//     "name"    string  display name, 1..128 bytes
//     "port"    integer TCP port of the node's Listener, 1..65535
//     "nonce"   string  32 lowercase hex digits, random per process start: tells a restart (new
//                       nonce) from a second machine that copied our identity (identity clash)
//     "summary" string  human-readable devices, e.g. "cpu: 2 threads, 24 GiB; vulkan0: llvmpipe",
//                       0..512 bytes
//   Other keys are ignored (later version-1 senders may add optional keys).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"

namespace shoal::lan {

inline constexpr size_t kMaxBeaconBytes = 1400;
inline constexpr uint8_t kBeaconVersion = 1;
inline constexpr size_t kMaxDeviceIdChars = 80;
inline constexpr size_t kMaxNameBytes = 128;
inline constexpr size_t kMaxSummaryBytes = 512;
inline constexpr size_t kNonceHexChars = 32;

struct Beacon {
  std::string deviceId;
  std::string name;
  uint16_t tcpPort = 0;
  std::string nonce;
  std::string summary;
};

// Why a datagram is not a beacon; Discovery counts each kind separately.
class BeaconError : public shoal::Error {
 public:
  enum class Kind { TooLarge, BadMagic, UnsupportedVersion, Malformed };
  BeaconError(Kind kind, const std::string& message) : shoal::Error(message), m_kind(kind) {}
  Kind kind() const { return m_kind; }

 private:
  Kind m_kind;
};

// The datagram for a beacon. Throws BeaconError(Malformed) when a field is out of its limits
// and BeaconError(TooLarge) when the encoding exceeds kMaxBeaconBytes (a name or summary full of
// characters that JSON escapes), naming the field and sizes.
std::vector<uint8_t> encodeBeacon(const Beacon& beacon);

// Parses and validates one datagram. Throws BeaconError naming what is wrong; never reads past
// `datagram`.
Beacon decodeBeacon(std::span<const uint8_t> datagram);

// A fresh random nonce (kNonceHexChars lowercase hex digits) from the OS's random source.
std::string makeBeaconNonce();

}  // namespace shoal::lan
