// Frames on the wire: what encodes, what decodes in any split, and how every malformed stream is
// refused (a TransportError(Protocol) naming the problem, never a crash or a huge allocation).

#include <QtTest>

#include "lan/transport/connection.h"
#include "lan/transport/wire_format.h"

using namespace shoal::lan;

namespace {

Message makeMessage(const std::string& op, size_t blobBytes) {
  Message m;
  m.control = {{"op", op}, {"id", 7}, {"text", "h\xc3\xa9llo"}};
  m.blob.resize(blobBytes);
  for (size_t i = 0; i < blobBytes; ++i) m.blob[i] = static_cast<uint8_t>(i * 31 + 5);
  return m;
}

std::vector<uint8_t> header(uint32_t jsonLength, uint32_t blobLength) {
  const auto h = encodeFrameHeader(jsonLength, blobLength);
  return std::vector<uint8_t>(h.begin(), h.end());
}

// Feeds `bytes` and returns the TransportError message, or "" when nothing was thrown.
std::string feedError(FrameDecoder& d, const std::vector<uint8_t>& bytes) {
  try {
    d.feed(bytes);
  } catch (const TransportError& e) {
    if (e.kind() != TransportError::Kind::Protocol) return "wrong kind";
    return e.what();
  }
  return "";
}

std::vector<uint8_t> frameWithJson(const std::string& json) {
  const auto h = encodeFrameHeader(static_cast<uint32_t>(json.size()), 0);
  std::vector<uint8_t> f(h.size() + json.size());
  std::copy(h.begin(), h.end(), f.begin());
  std::copy(json.begin(), json.end(), f.begin() + static_cast<std::ptrdiff_t>(h.size()));
  return f;
}

}  // namespace

class TestWireFormat : public QObject {
  Q_OBJECT

 private slots:
  void headerIsMagicVersionAndLittleEndianLengths() {
    const auto h = encodeFrameHeader(0x01020304, 0x0a0b0c0d);
    const std::vector<uint8_t> want = {'S', 'H', 'L', 1, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a};
    QCOMPARE(std::vector<uint8_t>(h.begin(), h.end()), want);
  }

  void aFrameRoundTripsWithItsBlob() {
    const Message m = makeMessage("forward", 1000);
    FrameDecoder d;
    d.feed(encodeFrame(m));
    auto out = d.next();
    QVERIFY(out.has_value());
    QCOMPARE(out->control, m.control);
    QCOMPARE(out->blob, m.blob);
    QVERIFY(!d.next().has_value());
  }

  void framesSplitAtEveryByteDecodeInOrder() {
    std::vector<uint8_t> stream;
    for (int i = 0; i < 3; ++i) {
      const auto f =
          encodeFrame(makeMessage("op" + std::to_string(i), static_cast<size_t>(i * 50)));
      stream.insert(stream.end(), f.begin(), f.end());
    }
    FrameDecoder d;
    std::vector<Message> got;
    for (uint8_t b : stream) {
      d.feed(std::span<const uint8_t>(&b, 1));
      while (auto m = d.next()) got.push_back(std::move(*m));
    }
    QCOMPARE(got.size(), size_t{3});
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(got[static_cast<size_t>(i)].control["op"].get<std::string>(),
               "op" + std::to_string(i));
      QCOMPARE(got[static_cast<size_t>(i)].blob.size(), static_cast<size_t>(i * 50));
    }
  }

  void aTruncatedFrameYieldsNothingAndNoError() {
    const auto f = encodeFrame(makeMessage("x", 100));
    FrameDecoder d;
    d.feed(std::span<const uint8_t>(f.data(), f.size() - 1));
    QVERIFY(!d.next().has_value());
    QCOMPARE(d.partialBytes(), f.size() - 1);
  }

  void badMagicIsRefusedAtTheFirstByte() {
    FrameDecoder d;
    const std::string err = feedError(d, {'G'});
    QVERIFY2(err.find("magic") != std::string::npos, err.c_str());
  }

  void anotherVersionIsRefused() {
    FrameDecoder d;
    const std::string err = feedError(d, {'S', 'H', 'L', 2});
    QVERIFY2(err.find("version 2") != std::string::npos, err.c_str());
  }

  void aHeaderAnnouncingFourGibibytesIsRefusedBeforeAnyBody() {
    FrameDecoder d;
    const std::string err = feedError(d, header(10, 0xffffffffu));
    QVERIFY2(err.find("blob length 4294967295") != std::string::npos, err.c_str());
  }

  void jsonLongerThanOneMebibyteIsRefused() {
    FrameDecoder d;
    const std::string err = feedError(d, header(kMaxJsonBytes + 1, 0));
    QVERIFY2(err.find("JSON length") != std::string::npos, err.c_str());
  }

  void anEmptyJsonIsRefused() {
    FrameDecoder d;
    QVERIFY(!feedError(d, header(0, 0)).empty());
  }

  void jsonThatIsNotAnObjectIsRefused() {
    FrameDecoder d;
    const std::string err = feedError(d, frameWithJson("[1,2]"));
    QVERIFY2(err.find("not an object") != std::string::npos, err.c_str());
  }

  void jsonWithoutStringOpIsRefused() {
    FrameDecoder a, b;
    QVERIFY(feedError(a, frameWithJson(R"({"id":1})")).find("no \"op\"") != std::string::npos);
    QVERIFY(feedError(b, frameWithJson(R"({"op":5})")).find("not a string") != std::string::npos);
  }

  void invalidJsonIsRefused() {
    FrameDecoder d;
    QVERIFY(feedError(d, frameWithJson("{\"op\":")).find("not valid JSON") != std::string::npos);
  }

  void deeplyNestedJsonIsRefused() {
    std::string json = "{\"op\":\"x\",\"a\":";
    for (int i = 0; i < 100000; ++i) json += '[';
    for (int i = 0; i < 100000; ++i) json += ']';
    json += '}';
    FrameDecoder d;
    const std::string err = feedError(d, frameWithJson(json));
    QVERIFY2(err.find("deeper") != std::string::npos, err.c_str());
  }

  void afterAnErrorTheDecoderStaysFailed() {
    FrameDecoder d;
    QVERIFY(!feedError(d, {'X'}).empty());
    QVERIFY(!feedError(d, encodeFrame(makeMessage("ok", 0))).empty());
  }

  void garbageNeverCrashes() {
    uint32_t state = 12345;
    for (int round = 0; round < 200; ++round) {
      std::vector<uint8_t> bytes(static_cast<size_t>(round * 7 + 1));
      for (auto& b : bytes) {
        state = state * 1664525u + 1013904223u;
        b = static_cast<uint8_t>(state >> 24);
      }
      if (round % 2 == 0 && bytes.size() >= 4) {  // valid magic and version, random lengths
        bytes[0] = 'S';
        bytes[1] = 'H';
        bytes[2] = 'L';
        bytes[3] = 1;
      }
      FrameDecoder d;
      feedError(d, bytes);
      while (d.next()) {
      }
    }
  }

  void beforeTrustAHeaderAnnouncingABlobIsRefusedBeforeAnyBody() {
    FrameDecoder d(kPreAuthFrameLimits);
    const std::string err = feedError(d, header(16, 64u << 20));
    QVERIFY2(err.find("blob length 67108864 exceeds the limit of 0 before the peer is trusted") !=
                 std::string::npos,
             err.c_str());
    QCOMPARE(d.partialBytes(), kFrameHeaderBytes);  // nothing of the body was taken
  }

  void beforeTrustJsonOverSixteenKibibytesIsRefused() {
    FrameDecoder d(kPreAuthFrameLimits);
    const std::string err = feedError(d, header((16u << 10) + 1, 0));
    QVERIFY2(err.find("JSON length 16385 exceeds the limit of 16384") != std::string::npos,
             err.c_str());
  }

  void beforeTrustTheLargestPairingMessageFits() {
    // pair_start with a name at the sender's cap and the 65-byte share in hex.
    Message start;
    start.control = {
        {"op", "pair_start"}, {"name", std::string(128, 'n')}, {"share", std::string(130, 'a')}};
    FrameDecoder d(kPreAuthFrameLimits);
    d.feed(encodeFrame(start));
    QVERIFY(d.next().has_value());
  }

  void raisedLimitsApplyFromTheNextFrame() {
    FrameDecoder d(kPreAuthFrameLimits);
    d.feed(encodeFrame(makeMessage("hello", 0)));
    QVERIFY(d.next().has_value());
    d.setLimits(kSessionFrameLimits);
    const Message m = makeMessage("weights_chunk", 100000);
    d.feed(encodeFrame(m));
    const auto got = d.next();
    QVERIFY(got.has_value());
    QVERIFY(got->blob == m.blob);
  }

  void aDecodedFrameReportsItsJsonLength() {
    const Message m = makeMessage("forward", 10);
    const std::string json = encodeControl(m);
    FrameDecoder d;
    d.feed(encodeFrame(m));
    const auto frame = d.nextFrame();
    QVERIFY(frame.has_value());
    QCOMPARE(frame->jsonBytes, json.size());
  }

  void encodingRefusesAControlWithoutOp() {
    Message m;
    m.control = {{"id", 1}};
    QVERIFY_THROWS_EXCEPTION(TransportError, encodeFrame(m));
  }

  void encodingRefusesABlobOverTheLimit() {
    Message m;
    m.control = {{"op", "x"}};
    m.blob.resize(size_t{kMaxBlobBytes} + 1);
    QVERIFY_THROWS_EXCEPTION(TransportError, encodeFrame(m));
  }
};

QTEST_APPLESS_MAIN(TestWireFormat)
#include "test_wire_format.moc"
