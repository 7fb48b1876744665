#pragma once
// One Message on the wire is one frame:
//
//   offset size  field
//   0      3     magic "SHL"
//   3      1     version (kWireVersion = 1)
//   4      4     jsonLength  (u32, little endian), 1 .. kMaxJsonBytes
//   8      4     blobLength  (u32, little endian), 0 .. kMaxBlobBytes
//   12     ...   jsonLength bytes of UTF-8 JSON text: an object with a string "op"
//   ...    ...   blobLength bytes of blob
//
// The limits are checked on the header alone, before any byte of the body is buffered, so a
// peer cannot make us allocate more than one frame's worth of validated size. JSON nesting is
// capped too (kMaxJsonDepth) so a hostile "[[[[..." cannot exhaust the stack of whoever walks
// the parsed value. The full protocol is described in lan/transport/protocol.md.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lan/transport/message.h"

namespace shoal::lan {

inline constexpr std::array<uint8_t, 3> kWireMagic = {'S', 'H', 'L'};
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 12;
inline constexpr uint32_t kMaxJsonBytes = 1u << 20;   // 1 MiB
inline constexpr uint32_t kMaxBlobBytes = 64u << 20;  // 64 MiB
inline constexpr int kMaxJsonDepth = 64;

// The 12-byte header for a frame of these sizes (not validated; see encodeFrame).
std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(uint32_t jsonLength, uint32_t blobLength);

// The JSON text of `message.control`, validated for sending: an object with a string "op",
// within kMaxJsonBytes, blob within kMaxBlobBytes. Throws TransportError(Protocol) otherwise.
std::string encodeControl(const Message& message);

// The whole frame (header + JSON + blob) as one buffer. Throws as encodeControl().
std::vector<uint8_t> encodeFrame(const Message& message);

// Incremental decoder: feed() it bytes as they arrive in any split; complete Messages come out
// of next() in order. Anything malformed throws TransportError(Protocol) naming the field and the
// numbers; after a throw the decoder is poisoned (every later feed() throws again), because the
// stream has lost its framing.
class FrameDecoder {
 public:
  void feed(std::span<const uint8_t> bytes);
  // The oldest complete message, or nothing when none is complete yet.
  std::optional<Message> next();
  // Messages decoded and not yet taken by next().
  size_t pendingMessages() const { return m_ready.size(); }
  // Bytes of the frame being assembled (header, JSON and blob so far).
  size_t partialBytes() const { return m_headerFill + m_json.size() + m_blob.size(); }
  // Blob bytes of the messages decoded and not yet taken (the reader uses it for backpressure).
  size_t pendingBlobBytes() const { return m_readyBlobBytes; }

 private:
  void parseHeader();
  void finishFrame();
  [[noreturn]] void fail(const std::string& what);

  std::array<uint8_t, kFrameHeaderBytes> m_header{};
  size_t m_headerFill = 0;
  bool m_inBody = false;
  uint32_t m_jsonLength = 0;
  uint32_t m_blobLength = 0;
  std::string m_json;
  std::vector<uint8_t> m_blob;
  std::deque<Message> m_ready;
  size_t m_readyBlobBytes = 0;
  bool m_poisoned = false;
  uint64_t m_frameIndex = 0;  // for error messages: which frame of the stream was bad
};

// Parses a frame's JSON text the way the decoder does (object, string "op", depth cap).
// Throws TransportError(Protocol).
nlohmann::json parseControl(std::string_view text);

}  // namespace shoal::lan
