// libFuzzer target for the discovery beacon parser (lan/discovery/beacon.h): any datagram either
// decodes or throws BeaconError; a decoded beacon re-encodes (never larger than what was
// received: JSON escapes only shrink on the way back) and decodes to the same fields.
//
//   ./build-fuzz/tests/fuzz/fuzz_beacon -max_total_time=60 tests/fuzz/corpus/beacon

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lan/discovery/beacon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::lan;
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
  return 0;
}
