// Writes the seed corpus for fuzz_gguf: tiny GGUF files (< 4 KB each) that between them use
// every metadata value type, nested and empty arrays, every tensor type Shoal knows, a custom
// alignment, GGUF v2, and a file without tensors. Regenerate with
//
//   cmake --build build-fuzz --target gguf_fuzz_seeds
//   ./build-fuzz/tests/fuzz/gguf_fuzz_seeds tests/fuzz/corpus/gguf

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_writer.h"

using namespace shoal::gguf;

namespace {

void save(const std::filesystem::path& dir, const char* name, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  std::printf("%s: %zu bytes\n", name, bytes.size());
}

// A tensor of one block (or 4 elements for plain types), quantized from a ramp when possible.
void addSmallTensor(Writer& w, TensorType type) {
  const TypeTraits t = typeTraits(type);
  const int64_t n = t.blockSize == 1 ? 4 : t.blockSize;
  std::vector<uint8_t> bytes(rowBytes(type, n));
  if (quantizable(type)) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i - n / 3);
    quantizeRow(type, x.data(), bytes.data(), n);
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 29 + 7);
  }
  w.addTensor(std::string(t.name) + ".weight", type, {n}, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);

  {  // every value type, nested and empty arrays
    Writer w;
    w.set("general.architecture", Value::string("llama"));
    w.set("u8", Value::u8(200));
    w.set("i8", Value::i8(-5));
    w.set("u16", Value::u16(60000));
    w.set("i16", Value::i16(-300));
    w.set("u32", Value::u32(4000000000u));
    w.set("i32", Value::i32(-70000));
    w.set("u64", Value::u64(1ull << 40));
    w.set("i64", Value::i64(-(1ll << 40)));
    w.set("f32", Value::f32(0.5f));
    w.set("f64", Value::f64(-2.25));
    w.set("bool", Value::boolean(true));
    w.set("str", Value::string("hello"));
    w.set("arr", Value::array(ValueType::Int32, {Value::i32(1), Value::i32(2)}));
    w.set("empty", Value::array(ValueType::String, {}));
    w.set("nested",
          Value::array(ValueType::Array,
                       {Value::array(ValueType::String, {Value::string("a")}),
                        Value::array(ValueType::Array,
                                     {Value::array(ValueType::Bool, {Value::boolean(false)})})}));
    save(dir, "values.gguf", w.toBytes());
  }
  {  // dequantizable tensor types
    Writer w;
    w.set("general.architecture", Value::string("llama"));
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::F64,
                         TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                         TensorType::Q8_0, TensorType::Q8_1, TensorType::Q2_K, TensorType::Q3_K}) {
      addSmallTensor(w, t);
    }
    save(dir, "tensors_a.gguf", w.toBytes());
  }
  {
    Writer w;
    for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K}) {
      addSmallTensor(w, t);
    }
    save(dir, "tensors_k.gguf", w.toBytes());
  }
  {  // types that parse but do not dequantize, and a 2-D tensor
    Writer w;
    for (TensorType t : {TensorType::I8, TensorType::I32, TensorType::IQ3_XXS, TensorType::IQ3_S,
                         TensorType::IQ2_XXS}) {
      addSmallTensor(w, t);
    }
    w.addTensor("matrix", TensorType::Q8_0, {32, 2, 1, 1}, std::vector<uint8_t>(68, 3));
    save(dir, "tensors_other.gguf", w.toBytes());
  }
  {  // custom alignment
    Writer w;
    w.set("general.alignment", Value::u32(64));
    addSmallTensor(w, TensorType::F32);
    addSmallTensor(w, TensorType::Q8_0);
    save(dir, "aligned64.gguf", w.toBytes());
  }
  {  // GGUF v2 (same layout as v3 for little-endian files)
    Writer w;
    w.set("tokenizer.ggml.tokens",
          Value::array(ValueType::String, {Value::string("<s>"), Value::string("a")}));
    addSmallTensor(w, TensorType::F16);
    std::vector<uint8_t> bytes = w.toBytes();
    bytes[4] = 2;
    save(dir, "version2.gguf", bytes);
  }
  {  // header only
    Writer w;
    save(dir, "empty.gguf", w.toBytes());
  }
  return 0;
}
