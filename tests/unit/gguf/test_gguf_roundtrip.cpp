// Writer -> reader round trips: every metadata value type (nested and empty arrays included),
// tensor bytes and placement, typed getters, and the writer's own validation.

#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <limits>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "tests/unit/gguf/gguf_bytes.h"

using namespace shoal::gguf;

namespace {

bool sameValue(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (const Array* aa = a.asArray()) {
    const Array* bb = b.asArray();
    if (!bb || aa->elementType != bb->elementType || aa->items.size() != bb->items.size()) {
      return false;
    }
    for (size_t i = 0; i < aa->items.size(); ++i) {
      if (!sameValue(aa->items[i], bb->items[i])) return false;
    }
    return true;
  }
  if (a.type == ValueType::Float32 || a.type == ValueType::Float64) {
    const double x = *a.asFloat();
    const double y = *b.asFloat();
    return (std::isnan(x) && std::isnan(y)) || x == y;
  }
  if (a.data.index() != b.data.index()) return false;
  if (const std::string* s = a.asString()) return *s == *b.asString();
  if (const auto* u = std::get_if<uint64_t>(&a.data)) return *u == std::get<uint64_t>(b.data);
  if (const auto* i = std::get_if<int64_t>(&a.data)) return *i == std::get<int64_t>(b.data);
  return a.asBool() == b.asBool();
}

// One key per value type, plus nested, empty and string arrays.
std::vector<std::pair<std::string, Value>> everyValueType() {
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("t.u8", Value::u8(255));
  kv.emplace_back("t.i8", Value::i8(-128));
  kv.emplace_back("t.u16", Value::u16(65535));
  kv.emplace_back("t.i16", Value::i16(-32768));
  kv.emplace_back("t.u32", Value::u32(4294967295u));
  kv.emplace_back("t.i32", Value::i32(std::numeric_limits<int32_t>::min()));
  kv.emplace_back("t.u64", Value::u64(std::numeric_limits<uint64_t>::max()));
  kv.emplace_back("t.i64", Value::i64(std::numeric_limits<int64_t>::min()));
  kv.emplace_back("t.f32", Value::f32(-1.5e-7f));
  kv.emplace_back("t.f32_inf", Value::f32(std::numeric_limits<float>::infinity()));
  kv.emplace_back("t.f64", Value::f64(3.141592653589793));
  kv.emplace_back("t.bool_true", Value::boolean(true));
  kv.emplace_back("t.bool_false", Value::boolean(false));
  kv.emplace_back("t.string", Value::string("héllo \"gguf\"\n"));
  kv.emplace_back("t.string_empty", Value::string(""));
  kv.emplace_back("t.array_i32",
                  Value::array(ValueType::Int32, {Value::i32(1), Value::i32(-2), Value::i32(3)}));
  kv.emplace_back("t.array_string",
                  Value::array(ValueType::String,
                               {Value::string("a"), Value::string(""), Value::string("ccc")}));
  kv.emplace_back("t.array_empty_f32", Value::array(ValueType::Float32, {}));
  kv.emplace_back("t.array_empty_array", Value::array(ValueType::Array, {}));
  kv.emplace_back("t.array_bool",
                  Value::array(ValueType::Bool, {Value::boolean(true), Value::boolean(false)}));
  kv.emplace_back("t.array_nested",
                  Value::array(ValueType::Array,
                               {Value::array(ValueType::UInt8, {Value::u8(1), Value::u8(2)}),
                                Value::array(ValueType::String, {Value::string("x")}),
                                Value::array(ValueType::Array,
                                             {Value::array(ValueType::Float64, {Value::f64(-0.25)}),
                                              Value::array(ValueType::Int64, {})})}));
  return kv;
}

std::vector<uint8_t> iota(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * 7);
  return v;
}

}  // namespace

class GgufRoundTripTest : public QObject {
  Q_OBJECT

 private slots:
  void everyValueTypeSurvivesARoundTrip() {
    Writer w;
    const auto kv = everyValueType();
    for (const auto& [k, v] : kv) w.set(k, v);
    const std::vector<uint8_t> bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.metadata().size(), kv.size());
    for (size_t i = 0; i < kv.size(); ++i) {
      QCOMPARE(f.metadata()[i].key, kv[i].first);  // insertion order is kept
      QVERIFY2(sameValue(f.metadata()[i].value, kv[i].second), kv[i].first.c_str());
    }
  }

  void emptyArrayKeepsItsElementType() {
    Writer w;
    w.set("empty", Value::array(ValueType::Float32, {}));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    const Array* a = f.find("empty")->asArray();
    QVERIFY(a != nullptr);
    QCOMPARE(a->elementType, ValueType::Float32);
    QVERIFY(a->items.empty());
  }

  void setReplacesAnExistingKeyInPlace() {
    Writer w;
    w.set("a", Value::u32(1));
    w.set("b", Value::u32(2));
    w.set("a", Value::string("one"));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    QCOMPARE(f.metadata().size(), size_t{2});
    QCOMPARE(f.metadata()[0].key, std::string("a"));
    QCOMPARE(f.getString("a"), std::string("one"));
  }

  void tensorBytesAndShapesSurviveARoundTrip() {
    Writer w;
    w.addTensor("a", TensorType::F32, {3}, iota(12, 1));
    w.addTensor("b", TensorType::Q8_0, {64, 2}, iota(4 * 34, 9));
    w.addTensor("c", TensorType::Q4_K, {256, 1, 2}, iota(2 * 144, 3));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    QCOMPARE(f.tensors().size(), size_t{3});
    const TensorInfo* b = f.findTensor("b");
    QVERIFY(b != nullptr);
    QCOMPARE(b->type, TensorType::Q8_0);
    QCOMPARE(b->dims, (std::vector<int64_t>{64, 2}));
    QCOMPARE(b->rows(), int64_t{2});
    QCOMPARE(b->elementCount(), int64_t{128});
    QCOMPARE(b->nbytes, size_t{136});
    QVERIFY(std::equal(b->data, b->data + b->nbytes, iota(136, 9).begin()));
    const TensorInfo* c = f.findTensor("c");
    QCOMPARE(c->dims, (std::vector<int64_t>{256, 1, 2}));
    QVERIFY(std::equal(c->data, c->data + c->nbytes, iota(288, 3).begin()));
    QVERIFY(f.findTensor("missing") == nullptr);
  }

  void tensorDataIsPlacedAtTheRequestedAlignment() {
    Writer w;
    w.set("general.alignment", Value::u32(64));
    w.addTensor("a", TensorType::F32, {3}, iota(12, 0));
    w.addTensor("b", TensorType::F16, {5}, iota(10, 0));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    QCOMPARE(f.alignment(), size_t{64});
    for (const TensorInfo& t : f.tensors()) {
      QCOMPARE(t.offset % 64, uint64_t{0});
      QCOMPARE(static_cast<size_t>(t.data - bytes.data()) % 64, size_t{0});
    }
  }

  void streamedTensorMatchesTheSameBytesGivenUpFront() {
    const std::vector<uint8_t> data = iota(3 * 34 * 4, 5);
    Writer plain;
    plain.addTensor("t", TensorType::Q8_0, {96, 4}, data);
    Writer streamed;
    streamed.addTensorStreamed("t", TensorType::Q8_0, {96, 4},
                               [&](int64_t first, int64_t count, uint8_t* dst) {
                                 std::copy_n(data.begin() + first * 102, count * 102, dst);
                               });
    QCOMPARE(streamed.toBytes(), plain.toBytes());
  }

  void writeThenOpenReadsTheSameFile() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::filesystem::path path = dir.filePath("x.gguf").toStdString();
    Writer w;
    w.set("general.architecture", Value::string("llama"));
    w.addTensor("a", TensorType::F32, {4}, iota(16, 0));
    w.write(path);
    const File f = File::open(path);
    QCOMPARE(f.getString("general.architecture"), std::string("llama"));
    QCOMPARE(f.fileSize(), std::filesystem::file_size(path));
    QVERIFY(std::equal(f.tensors()[0].data, f.tensors()[0].data + 16, iota(16, 0).begin()));
    // Nothing but the final file is left behind.
    QCOMPARE(std::distance(std::filesystem::directory_iterator(dir.path().toStdString()),
                           std::filesystem::directory_iterator()),
             std::ptrdiff_t{1});
  }

  // releasePages drops a mapped file's pages from the resident set (statm's resident count
  // falls by about the range), the bytes still read the same afterwards, and over a caller's
  // buffer it changes nothing.
  void releasePagesDropsMappedPagesAndKeepsTheBytes() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::filesystem::path path = dir.filePath("big.gguf").toStdString();
    const size_t bytes = size_t{32} << 20;
    Writer w;
    w.addTensor("t", TensorType::F32, {static_cast<int64_t>(bytes / 4)}, iota(bytes, 3));
    w.write(path);
    const File f = File::open(path);
    const TensorInfo& t = f.tensors()[0];
    auto residentBytes = [] {
      std::ifstream statm("/proc/self/statm");
      size_t total = 0, resident = 0;
      statm >> total >> resident;
      return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    };
    uint64_t sum = 0;
    for (size_t i = 0; i < t.nbytes; i += 4096) sum += t.data[i];  // fault every page in
    const size_t touched = residentBytes();
    f.releasePages(t.data, t.nbytes);
    const size_t released = residentBytes();
    QVERIFY2(released < touched && touched - released > bytes * 3 / 4,
             qPrintable(QString("resident %1 -> %2 bytes").arg(touched).arg(released)));
    const std::vector<uint8_t> expected = iota(bytes, 3);
    QVERIFY(std::equal(t.data, t.data + t.nbytes, expected.begin()));
    QVERIFY(sum > 0);

    const std::vector<uint8_t> buffer = w.toBytes();
    const File inMemory = File::fromBuffer(buffer);
    const TensorInfo& b = inMemory.tensors()[0];
    inMemory.releasePages(b.data, b.nbytes);  // a buffer: left alone (dropping would zero it)
    QVERIFY(std::equal(b.data, b.data + b.nbytes, expected.begin()));
  }

  void versionTwoFilesAreRead() {
    test::GgufBytes b;
    b.header(2, 1, 1).kvString("general.architecture", "llama");
    b.tensorInfo("t", {4}, 0, 0).alignTo(32).zeros(16);
    const File f = File::fromBuffer(b.bytes);
    QCOMPARE(f.version(), 2u);
    QCOMPARE(f.getString("general.architecture"), std::string("llama"));
    QCOMPARE(f.tensors()[0].nbytes, size_t{16});
  }

  void typedGettersConvertCompatibleTypes() {
    Writer w;
    w.set("i", Value::u32(7));
    w.set("f", Value::f32(0.5f));
    w.set("b", Value::boolean(true));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes);
    QCOMPARE(f.getInt("i"), int64_t{7});
    QCOMPARE(f.getFloat("i"), 7.0);
    QCOMPARE(f.getFloat("f"), 0.5);
    QCOMPARE(f.getIntOr("absent", -3), int64_t{-3});
    QCOMPARE(f.getStringOr("absent", "fb"), std::string("fb"));
    QCOMPARE(f.getBoolOr("b", false), true);
    QCOMPARE(f.getFloatOr("absent", 2.5), 2.5);
  }

  void typedGettersNameTheKeyOnATypeMismatch() {
    Writer w;
    w.set("name", Value::string("x"));
    w.set("big", Value::u64(std::numeric_limits<uint64_t>::max()));
    const auto bytes = w.toBytes();
    const File f = File::fromBuffer(bytes, "m.gguf");
    for (auto call : std::vector<std::function<void()>>{
             [&] { f.getInt("name"); }, [&] { f.getFloat("name"); },
             [&] { f.getBoolOr("name", false); }, [&] { f.getIntOr("name", 0); }}) {
      try {
        call();
        QFAIL("expected shoal::Error");
      } catch (const shoal::Error& e) {
        QVERIFY2(std::string(e.what()).find("m.gguf: key name") != std::string::npos, e.what());
      }
    }
    try {
      f.getInt("big");
      QFAIL("expected shoal::Error for a u64 beyond int64");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("big") != std::string::npos, e.what());
    }
    try {
      f.getString("absent");
      QFAIL("expected shoal::Error for a missing key");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("missing key absent") != std::string::npos, e.what());
    }
  }

  void writerRejectsInconsistentTensors() {
    Writer w;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, w.addTensor("t", TensorType::Q8_0, {32}, iota(33, 0)));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, w.addTensor("t", TensorType::Q8_0, {31}, iota(34, 0)));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, w.addTensor("t", TensorType::F32, {0}, {}));
    QVERIFY_THROWS_EXCEPTION(shoal::Error,
                             w.addTensor("t", TensorType::F32, {1, 1, 1, 1, 1}, iota(4, 0)));
    QVERIFY_THROWS_EXCEPTION(shoal::Error,
                             w.addTensor("t", static_cast<TensorType>(4), {1}, iota(4, 0)));
    w.addTensor("t", TensorType::F32, {1}, iota(4, 0));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, w.addTensor("t", TensorType::F32, {1}, iota(4, 0)));
  }

  void writerRejectsAnArrayItemOfTheWrongType() {
    Writer w;
    w.set("bad", Value::array(ValueType::Int32, {Value::string("x")}));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, w.toBytes());
  }
};

QTEST_GUILESS_MAIN(GgufRoundTripTest)
#include "test_gguf_roundtrip.moc"
