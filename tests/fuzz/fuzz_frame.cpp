// libFuzzer target for the frame decoder (lan/transport/wire_format.h): any byte stream, fed in
// two pieces split where the first input byte says, either decodes into Messages or throws
// TransportError(Protocol); never a crash, an over-read or an allocation beyond the frame limits.
// Every decoded Message re-encodes (unless its JSON grew past the limit when re-serialized, which
// encodeFrame refuses cleanly) and decodes back to the same control and blob.
//
//   ./build-fuzz/tests/fuzz/fuzz_frame -max_total_time=60 tests/fuzz/corpus/frame

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lan/transport/connection.h"
#include "lan/transport/wire_format.h"

namespace {

using namespace shoal::lan;

void checkRoundTrip(const Message& m) {
  std::vector<uint8_t> frame;
  try {
    frame = encodeFrame(m);
  } catch (const TransportError&) {
    return;  // e.g. 1e5 re-serializes as 100000.0 and a maximal JSON no longer fits
  }
  FrameDecoder again;
  again.feed(frame);  // throws (a finding) if our own encoding does not decode
  std::optional<Message> back = again.next();
  if (!back || back->control != m.control || back->blob != m.blob || again.next()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = std::min<size_t>(data[0], size - 1);
  const std::span<const uint8_t> input(data + 1, size - 1);
  FrameDecoder decoder;
  try {
    decoder.feed(input.first(split));
    while (auto m = decoder.next()) checkRoundTrip(*m);
    decoder.feed(input.subspan(split));
    while (auto m = decoder.next()) checkRoundTrip(*m);
  } catch (const TransportError& e) {
    if (e.kind() != TransportError::Kind::Protocol) std::abort();
  }
  return 0;
}
