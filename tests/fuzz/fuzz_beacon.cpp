// libFuzzer target for the discovery beacon parser (lan/discovery/beacon.h): any datagram either
// decodes or throws BeaconError; a decoded beacon re-encodes (never larger than what was
// received: JSON escapes only shrink on the way back) and decodes to the same fields. The raw
// bytes and the decoded name also go through the display-text sanitizer (display_name.h): its
// output is bounded, printable (no control byte) and a fixed point (sanitizing it again changes
// nothing, so it is valid UTF-8 by its own rules).
//
//   ./build-fuzz/tests/fuzz/fuzz_beacon -max_total_time=60 tests/fuzz/corpus/beacon

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "lan/discovery/beacon.h"
#include "lan/discovery/display_name.h"

namespace {

void checkSanitized(std::string_view text, size_t maxBytes) {
  const std::string safe = shoal::lan::sanitizeDisplayText(text, maxBytes);
  if (safe.size() > maxBytes) std::abort();
  for (const char c : safe) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) std::abort();
  }
  if (shoal::lan::sanitizeDisplayText(safe, maxBytes) != safe) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::lan;
  checkSanitized(std::string_view(reinterpret_cast<const char*>(data), size), 64);
  Beacon beacon;
  try {
    beacon = decodeBeacon(std::span<const uint8_t>(data, size));
  } catch (const BeaconError&) {
    return 0;
  }
  // Throws (a crash for libFuzzer) if a beacon we accepted could not be sent back out.
  const Beacon again = decodeBeacon(encodeBeacon(beacon));
  if (again.deviceId != beacon.deviceId || again.name != beacon.name ||
      again.tcpPort != beacon.tcpPort || again.nonce != beacon.nonce ||
      again.summary != beacon.summary) {
    std::abort();
  }
  checkSanitized(beacon.name, kMaxDisplayNameBytes);
  return 0;
}
