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
// peer cannot make us allocate more than one frame's worth of validated size. Which limits apply
// depends on the stage of the connection (FrameLimits): until the peer is authenticated only the
// small frames of the session opening and pairing are accepted. JSON nesting is capped too
// (kMaxJsonDepth) so a hostile "[[[[..." cannot exhaust the stack of whoever walks the parsed
// value. The full protocol is described in lan/transport/protocol.md.

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

// The largest frame a reader accepts. `stage` names the stage of the connection in errors.
struct FrameLimits {
  uint32_t maxJsonBytes = kMaxJsonBytes;
  uint32_t maxBlobBytes = kMaxBlobBytes;
  const char* stage = "in a session";
};

// Between trusted peers: control messages up to 1 MiB, blobs (weight chunks, hidden states) up to
// 64 MiB.
inline constexpr FrameLimits kSessionFrameLimits{kMaxJsonBytes, kMaxBlobBytes, "in a session"};
// Before the peer is trusted (TLS done, device ID not yet checked or not trusted): the only frames
// that may come are hello, pair_start and pair_confirm (each under 400 bytes; a pair_start name is
// cut to 128 bytes by the sender) and, on the client side, welcome, refused and pair_reply. 16 KiB
// leaves room for longer names and future fields; no blob. So an unauthenticated peer makes us
// buffer at most 16 KiB of frame, not 1 MiB + 64 MiB.
inline constexpr FrameLimits kPreAuthFrameLimits{16u << 10, 0, "before the peer is trusted"};

// The 12-byte header for a frame of these sizes (not validated; see encodeFrame).
std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(uint32_t jsonLength, uint32_t blobLength);

// The JSON text of `message.control`, validated for sending: an object with a string "op",
// within kMaxJsonBytes, blob within kMaxBlobBytes. Throws TransportError(Protocol) otherwise.
std::string encodeControl(const Message& message);

// The whole frame (header + JSON + blob) as one buffer. Throws as encodeControl().
std::vector<uint8_t> encodeFrame(const Message& message);

// One decoded frame: the message and the length of its JSON text (a reader charges it against its
// backpressure window; the parsed value does not remember it).
struct DecodedFrame {
  Message message;
  size_t jsonBytes = 0;
};

// Incremental decoder: feed() it bytes as they arrive in any split; complete Messages come out
// of next() in order. Anything malformed throws TransportError(Protocol) naming the field and the
// numbers; after a throw the decoder is poisoned (every later feed() throws again), because the
// stream has lost its framing.
class FrameDecoder {
 public:
  // Starts with the session limits (kSessionFrameLimits).
  FrameDecoder() = default;
  explicit FrameDecoder(FrameLimits limits) : m_limits(limits) {}

  // The limits for frames whose header has not been read yet (the frame being assembled keeps the
  // limits it was checked against).
  void setLimits(FrameLimits limits) { m_limits = limits; }
  const FrameLimits& limits() const { return m_limits; }

  void feed(std::span<const uint8_t> bytes);
  // The oldest complete message, or nothing when none is complete yet.
  std::optional<Message> next();
  // The same with the length of its JSON text.
  std::optional<DecodedFrame> nextFrame();
  // Messages decoded and not yet taken by next().
  size_t pendingMessages() const { return m_ready.size(); }
  // Bytes of the frame being assembled (header, JSON and blob so far).
  size_t partialBytes() const { return m_headerFill + m_json.size() + m_blob.size(); }

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
  FrameLimits m_limits = kSessionFrameLimits;
  std::deque<DecodedFrame> m_ready;
  bool m_poisoned = false;
  uint64_t m_frameIndex = 0;  // for error messages: which frame of the stream was bad
};

// Parses a frame's JSON text the way the decoder does (object, string "op", depth cap).
// Throws TransportError(Protocol).
nlohmann::json parseControl(std::string_view text);

}  // namespace shoal::lan
