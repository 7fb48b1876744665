#include "lan/transport/wire_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "lan/transport/connection.h"

namespace shoal::lan {

namespace {

uint32_t readU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void writeU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

[[noreturn]] void protocolError(const std::string& what) {
  throw TransportError(TransportError::Kind::Protocol, what);
}

}  // namespace

std::array<uint8_t, kFrameHeaderBytes> encodeFrameHeader(uint32_t jsonLength, uint32_t blobLength) {
  std::array<uint8_t, kFrameHeaderBytes> h{};
  std::copy(kWireMagic.begin(), kWireMagic.end(), h.begin());
  h[3] = kWireVersion;
  writeU32(h.data() + 4, jsonLength);
  writeU32(h.data() + 8, blobLength);
  return h;
}

std::string encodeControl(const Message& message) {
  const nlohmann::json& c = message.control;
  if (!c.is_object())
    protocolError("refusing to send a message whose control is not a JSON object");
  const auto op = c.find("op");
  if (op == c.end() || !op->is_string())
    protocolError("refusing to send a message without a string \"op\"");
  if (message.blob.size() > kMaxBlobBytes)
    protocolError("refusing to send op \"" + op->get<std::string>() + "\": blob of " +
                  std::to_string(message.blob.size()) + " bytes exceeds the limit of " +
                  std::to_string(kMaxBlobBytes));
  // Replace invalid UTF-8 instead of throwing from dump(): strings come from callers' data.
  std::string text = c.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxJsonBytes)
    protocolError("refusing to send op \"" + op->get<std::string>() + "\": JSON of " +
                  std::to_string(text.size()) + " bytes exceeds the limit of " +
                  std::to_string(kMaxJsonBytes));
  return text;
}

std::vector<uint8_t> encodeFrame(const Message& message) {
  const std::string text = encodeControl(message);
  const auto header = encodeFrameHeader(static_cast<uint32_t>(text.size()),
                                        static_cast<uint32_t>(message.blob.size()));
  // resize + memcpy rather than insert(): GCC 12 misreads the inserts as overflowing.
  std::vector<uint8_t> frame(header.size() + text.size() + message.blob.size());
  std::memcpy(frame.data(), header.data(), header.size());
  if (!text.empty()) std::memcpy(frame.data() + header.size(), text.data(), text.size());
  if (!message.blob.empty())
    std::memcpy(frame.data() + header.size() + text.size(), message.blob.data(),
                message.blob.size());
  return frame;
}

nlohmann::json parseControl(std::string_view text) {
  bool tooDeep = false;
  // The callback sees every value with its depth; values past the cap are dropped (return false)
  // so the tree stays shallow while the parser, which is iterative, finishes the text.
  nlohmann::json::parser_callback_t limitDepth =
      [&tooDeep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        if (depth > kMaxJsonDepth) {
          tooDeep = true;
          return false;
        }
        return true;
      };
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), limitDepth, false);
  if (j.is_discarded()) protocolError("frame JSON is not valid JSON");
  if (tooDeep)
    protocolError("frame JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (!j.is_object())
    protocolError(std::string("frame JSON is a ") + j.type_name() + ", not an object");
  const auto op = j.find("op");
  if (op == j.end()) protocolError("frame JSON has no \"op\"");
  if (!op->is_string())
    protocolError(std::string("frame JSON \"op\" is a ") + op->type_name() + ", not a string");
  return j;
}

void FrameDecoder::fail(const std::string& what) {
  m_poisoned = true;
  protocolError("frame " + std::to_string(m_frameIndex) + ": " + what);
}

void FrameDecoder::parseHeader() {
  m_jsonLength = readU32(m_header.data() + 4);
  m_blobLength = readU32(m_header.data() + 8);
  if (m_jsonLength == 0) fail("JSON length is 0 (every frame carries an object with \"op\")");
  if (m_jsonLength > m_limits.maxJsonBytes)
    fail("JSON length " + std::to_string(m_jsonLength) + " exceeds the limit of " +
         std::to_string(m_limits.maxJsonBytes) + " " + m_limits.stage);
  if (m_blobLength > m_limits.maxBlobBytes)
    fail("blob length " + std::to_string(m_blobLength) + " exceeds the limit of " +
         std::to_string(m_limits.maxBlobBytes) + " " + m_limits.stage);
  m_inBody = true;
  m_json.clear();
  m_blob.clear();
  // Grow with the bytes that actually arrive: a header alone (maybe from a peer that is not yet
  // authenticated) must not cost 64 MiB.
  m_json.reserve(std::min<uint32_t>(m_jsonLength, 64u << 10));
  m_blob.reserve(std::min<uint32_t>(m_blobLength, 64u << 10));
}

void FrameDecoder::finishFrame() {
  DecodedFrame frame;
  try {
    frame.message.control = parseControl(m_json);
  } catch (const TransportError& e) {
    fail(e.what());
  }
  frame.message.blob = std::move(m_blob);
  frame.jsonBytes = m_jsonLength;
  m_ready.push_back(std::move(frame));
  m_blob = {};
  m_json.clear();
  m_json.shrink_to_fit();
  m_headerFill = 0;
  m_inBody = false;
  ++m_frameIndex;
}

void FrameDecoder::feed(std::span<const uint8_t> bytes) {
  if (m_poisoned)
    protocolError("frame " + std::to_string(m_frameIndex) +
                  ": stream already failed to decode; no more frames can be read");
  while (!bytes.empty()) {
    if (!m_inBody) {
      const size_t take = std::min(bytes.size(), kFrameHeaderBytes - m_headerFill);
      std::memcpy(m_header.data() + m_headerFill, bytes.data(), take);
      const size_t before = m_headerFill;
      m_headerFill += take;
      bytes = bytes.subspan(take);
      // Check magic and version as soon as their bytes arrive: garbage fails at once instead of
      // after a whole header's worth of bytes.
      for (size_t i = before; i < std::min<size_t>(m_headerFill, 3); ++i)
        if (m_header[i] != kWireMagic[i]) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "bad magic byte 0x%02x at offset %zu (want \"SHL\")",
                        m_header[i], i);
          fail(buf);
        }
      if (before <= 3 && m_headerFill > 3 && m_header[3] != kWireVersion)
        fail("unsupported wire version " + std::to_string(m_header[3]) + " (this build speaks " +
             std::to_string(kWireVersion) + ")");
      if (m_headerFill < kFrameHeaderBytes) continue;
      parseHeader();
    }
    if (m_json.size() < m_jsonLength) {
      const size_t take = std::min<size_t>(bytes.size(), m_jsonLength - m_json.size());
      m_json.append(reinterpret_cast<const char*>(bytes.data()), take);
      bytes = bytes.subspan(take);
    }
    if (m_json.size() == m_jsonLength && m_blob.size() < m_blobLength) {
      const size_t take = std::min<size_t>(bytes.size(), m_blobLength - m_blob.size());
      const size_t at = m_blob.size();
      m_blob.resize(at + take);
      std::memcpy(m_blob.data() + at, bytes.data(), take);
      bytes = bytes.subspan(take);
    }
    if (m_json.size() == m_jsonLength && m_blob.size() == m_blobLength) finishFrame();
  }
}

std::optional<DecodedFrame> FrameDecoder::nextFrame() {
  if (m_ready.empty()) return std::nullopt;
  DecodedFrame frame = std::move(m_ready.front());
  m_ready.pop_front();
  return frame;
}

std::optional<Message> FrameDecoder::next() {
  std::optional<DecodedFrame> frame = nextFrame();
  if (!frame) return std::nullopt;
  return std::move(frame->message);
}

}  // namespace shoal::lan
