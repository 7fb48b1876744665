#include "engine/model/truncated_model.h"

#include <charconv>
#include <cstring>
#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"

namespace shoal::model {
namespace {

// The block index of a "blk.<i>.<rest>" tensor name, or -1 for a tensor outside the blocks.
int blockIndex(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  int index = -1;
  const auto [end, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || end == last || *end != '.') return -1;
  return index;
}

}  // namespace

void writeTruncatedModel(const std::filesystem::path& source, int layers,
                         const std::filesystem::path& out) {
  const gguf::File file = gguf::File::open(source);
  const std::string arch = file.getString("general.architecture");
  const std::string countKey = arch + ".block_count";
  const int64_t blocks = file.getInt(countKey);
  if (layers < 1 || layers > blocks) {
    throw Error(source.string() + ": cannot keep " + std::to_string(layers) + " of its " +
                std::to_string(blocks) + " layers");
  }
  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.metadata()) {
    if (kv.key == countKey) {
      // Keep the key's own integer type (llama.cpp writes u32).
      gguf::Value v = kv.value;
      if (v.type == gguf::ValueType::UInt32) {
        v = gguf::Value::u32(static_cast<uint32_t>(layers));
      } else if (v.type == gguf::ValueType::Int32) {
        v = gguf::Value::i32(layers);
      } else if (v.type == gguf::ValueType::UInt64) {
        v = gguf::Value::u64(static_cast<uint64_t>(layers));
      } else {
        v = gguf::Value::i64(layers);
      }
      w.set(kv.key, v);
    } else {
      w.set(kv.key, kv.value);
    }
  }
  w.set("general.name",
        gguf::Value::string(file.getStringOr("general.name", source.stem().string()) + " (first " +
                            std::to_string(layers) + " layers)"));
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (blockIndex(t.name) >= layers) continue;
    const gguf::TensorInfo* src = &t;  // lives as long as `file`, which outlives write()
    const size_t rowBytes = t.nbytes / static_cast<size_t>(t.rows());
    w.addTensorStreamed(t.name, t.type, t.dims,
                        [src, rowBytes](int64_t first, int64_t count, uint8_t* dst) {
                          std::memcpy(dst, src->data + static_cast<size_t>(first) * rowBytes,
                                      static_cast<size_t>(count) * rowBytes);
                        });
  }
  w.write(out);
}

}  // namespace shoal::model
