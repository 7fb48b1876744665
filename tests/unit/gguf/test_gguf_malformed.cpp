// Malformed GGUF input: every broken field gives a shoal::Error naming the field, the key or
// tensor and the numbers involved, and never a crash or an over-read.

#include <QtTest>
#include <string>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "tests/unit/gguf/gguf_bytes.h"

using namespace shoal::gguf;
using shoal::gguf::test::GgufBytes;

namespace {

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// Parses `bytes` and returns the error message; empty when parsing succeeded.
std::string parseError(const std::vector<uint8_t>& bytes) {
  try {
    File::fromBuffer(bytes, "bad.gguf");
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return {};
}

// A file with one F32 tensor "t" of 4 elements, correct in every field.
GgufBytes validFile() {
  GgufBytes b;
  b.header(3, 1, 1).kvString("general.architecture", "llama");
  b.tensorInfo("t", {4}, kF32, 0).alignTo(32).zeros(16);
  return b;
}

}  // namespace

#define EXPECT_ERROR_MENTIONS(bytes, ...)                                          \
  do {                                                                             \
    const std::string msg = parseError(bytes);                                     \
    QVERIFY2(!msg.empty(), "parsing succeeded but should have failed");            \
    for (const char* fragment : {__VA_ARGS__}) {                                   \
      QVERIFY2(msg.find(fragment) != std::string::npos,                            \
               qPrintable(QString("'%1' not in: %2").arg(fragment, msg.c_str()))); \
    }                                                                              \
  } while (0)

class GgufMalformedTest : public QObject {
  Q_OBJECT

 private slots:
  void theValidBaseFileParses() { QVERIFY(parseError(validFile().bytes).empty()); }

  void everyTruncationIsAnError() {
    Writer w;
    w.set("general.architecture", Value::string("llama"));
    w.set("nested",
          Value::array(ValueType::Array, {Value::array(ValueType::String, {Value::string("ab")})}));
    w.addTensor("t", TensorType::Q8_0, {32}, std::vector<uint8_t>(34, 1));
    const std::vector<uint8_t> full = w.toBytes();
    // The last tensor ends 30 bytes before the end (padding to 32), so cut inside its data.
    const size_t dataEnd = full.size() - 30;
    for (size_t n = 0; n < dataEnd; ++n) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
      const std::string msg = parseError(cut);
      QVERIFY2(!msg.empty(), qPrintable(QString("prefix of %1 bytes parsed").arg(n)));
      QVERIFY2(msg.rfind("bad.gguf: ", 0) == 0, msg.c_str());
    }
  }

  void truncatedTensorDataNamesTheTensorAndTheRange() {
    GgufBytes b = validFile();
    b.bytes.erase(
        b.bytes.end() - 4,
        b.bytes.end());  // (resize trips a GCC -Wstringop-overflow false positive under ASan)
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor t", "[0x80, 0x90)", "beyond end of file (size 140)");
  }

  void wrongMagicIsRejected() {
    GgufBytes b = validFile();
    b.bytes[0] = 'X';
    EXPECT_ERROR_MENTIONS(b.bytes, "not a GGUF file", "magic");
  }

  void versionOneIsRefused() {
    GgufBytes b;
    b.header(1, 0, 0);
    EXPECT_ERROR_MENTIONS(b.bytes, "version 1", "not supported");
  }

  void versionsAboveThreeAreRefused() {
    GgufBytes b;
    b.header(4, 0, 0);
    EXPECT_ERROR_MENTIONS(b.bytes, "version 4", "not supported");
  }

  void bigEndianFilesAreRecognisedAndRefused() {
    GgufBytes b;
    b.header(0x03000000, 0, 0);
    EXPECT_ERROR_MENTIONS(b.bytes, "big-endian");
  }

  void keyLengthBeyondTheFileIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).u64(1000).raw("abc", 3).zeros(10);
    EXPECT_ERROR_MENTIONS(b.bytes, "metadata entry 0", "key", "length 1000", "beyond end");
  }

  void stringValueLengthBeyondTheFileIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).str("general.name").u32(8).u64(uint64_t{1} << 62).zeros(8);
    EXPECT_ERROR_MENTIONS(b.bytes, "key general.name", "string value", "beyond end");
  }

  void absurdMetadataCountIsRejected() {
    GgufBytes b;
    b.header(3, 0, uint64_t{1} << 60).zeros(64);
    EXPECT_ERROR_MENTIONS(b.bytes, "metadata count 1152921504606846976");
  }

  void absurdTensorCountIsRejected() {
    GgufBytes b;
    b.header(3, 1000000, 0).zeros(64);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor count 1000000");
  }

  void absurdArrayLengthIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).str("arr").u32(9).u32(5).u64(uint64_t{1} << 40).zeros(16);
    EXPECT_ERROR_MENTIONS(b.bytes, "key arr", "1099511627776", "cannot fit");
  }

  void unknownValueTypeIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).str("k").u32(13).zeros(8);
    EXPECT_ERROR_MENTIONS(b.bytes, "key k", "unknown value type 13");
  }

  void unknownArrayElementTypeIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).str("k").u32(9).u32(77).u64(1).zeros(8);
    EXPECT_ERROR_MENTIONS(b.bytes, "key k", "unknown element type 77");
  }

  void invalidBoolIsRejected() {
    GgufBytes b;
    b.header(3, 0, 1).str("flag").u32(7).u8(2);
    EXPECT_ERROR_MENTIONS(b.bytes, "key flag", "bool", "is 2");
  }

  void arrayNestingIsBounded() {
    GgufBytes b;
    b.header(3, 0, 1).str("deep").u32(9);
    for (int i = 0; i < 9; ++i) b.u32(9).u64(1);  // 9 nested arrays, then never an element
    b.u32(4).u64(0);
    EXPECT_ERROR_MENTIONS(b.bytes, "key deep", "nested deeper than 8");
  }

  void duplicateKeysAreRejected() {
    GgufBytes b;
    b.header(3, 0, 2).kvU32("k.dup", 1).kvU32("k.dup", 2);
    EXPECT_ERROR_MENTIONS(b.bytes, "key k.dup", "duplicate key");
  }

  void alignmentMustBeANonzeroPowerOfTwo() {
    for (uint32_t a : {0u, 3u, 48u}) {
      GgufBytes b;
      b.header(3, 0, 1).kvU32("general.alignment", a);
      EXPECT_ERROR_MENTIONS(b.bytes, "general.alignment", "power of 2");
    }
    GgufBytes s;
    s.header(3, 0, 1).kvString("general.alignment", "32");
    EXPECT_ERROR_MENTIONS(s.bytes, "general.alignment", "unsigned integer");
  }

  void tooManyDimensionsAreRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("blk.0.w", {1, 1, 1, 1, 1}, kF32, 0).alignTo(32).zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor blk.0.w", "n_dims 5");
  }

  void zeroDimensionsAreRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("w", {}, kF32, 0).alignTo(32).zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor w", "n_dims 0");
  }

  void zeroSizedDimensionIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("w", {4, 0}, kF32, 0).alignTo(32).zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor w", "dimension 1 is 0");
  }

  void negativeDimensionIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("w", {4, ~uint64_t{0}}, kF32, 0).alignTo(32).zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor w", "dimension 1 is -1");
  }

  void overflowingElementCountIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0)
        .tensorInfo("w", {uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0)
        .alignTo(32)
        .zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor w", "overflows");
  }

  void overflowingByteSizeIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0)
        .tensorInfo("w", {uint64_t{1} << 31, uint64_t{1} << 31}, 27 /* i64 */, 0)
        .alignTo(32)
        .zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor w", "overflows");
  }

  void rowLengthMustBeAMultipleOfTheBlockSize() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("q", {33, 2}, kQ8_0, 0).alignTo(32).zeros(128);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor q", "row length 33", "q8_0 block size 32");
  }

  void unknownTensorTypeIsRejected() {
    for (uint32_t type : {4u, 31u, 1000u}) {
      GgufBytes b;
      b.header(3, 1, 0).tensorInfo("t", {4}, type, 0).alignTo(32).zeros(32);
      const std::string expected = "unknown tensor type " + std::to_string(type);
      EXPECT_ERROR_MENTIONS(b.bytes, "tensor t", expected.c_str());
    }
  }

  void misalignedDataOffsetIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("t", {4}, kF32, 4).alignTo(32).zeros(64);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor t", "offset 0x4", "alignment 32");
  }

  void dataOffsetBeyondTheFileIsRejected() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("blk.3.attn_q.weight", {4}, kF32, 0x1000).alignTo(32).zeros(32);
    // Data section starts at 0x60: the tensor would occupy [0x1060, 0x1070).
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor blk.3.attn_q.weight", "[0x1060, 0x1070)",
                          "beyond end of file (size 128)");
  }

  void hugeDataOffsetDoesNotWrapAround() {
    GgufBytes b;
    b.header(3, 1, 0).tensorInfo("t", {4}, kF32, ~uint64_t{31}).alignTo(32).zeros(32);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor t");
  }

  void duplicateTensorNamesAreRejected() {
    GgufBytes b;
    b.header(3, 2, 0).tensorInfo("same", {4}, kF32, 0).tensorInfo("same", {4}, kF32, 32);
    b.alignTo(32).zeros(64);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor same", "duplicate tensor name");
  }

  void overlappingTensorDataIsRejected() {
    GgufBytes b;
    b.header(3, 2, 0).tensorInfo("a", {16}, kF32, 0).tensorInfo("b", {4}, kF32, 32);
    b.alignTo(32).zeros(96);
    EXPECT_ERROR_MENTIONS(b.bytes, "tensor b", "overlaps tensor a");
  }

  void errorsCarryTheFileName() {
    GgufBytes b;
    b.header(9, 0, 0);
    EXPECT_ERROR_MENTIONS(b.bytes, "bad.gguf: ");
  }

  void openingAMissingFileNamesThePath() {
    try {
      File::open("/nonexistent/dir/model.gguf");
      QFAIL("expected shoal::Error");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("/nonexistent/dir/model.gguf: cannot open") == 0,
               e.what());
    }
  }
};

QTEST_GUILESS_MAIN(GgufMalformedTest)
#include "test_gguf_malformed.moc"
