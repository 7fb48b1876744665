// libFuzzer target for the GGUF reader: any byte string either parses or throws shoal::Error;
// on success every metadata value is read through every accessor and the first row of each
// dequantizable tensor is decoded; the first half of the input is also parsed as a header prefix
// (File::fromHeader) and estimated (plan::estimateFit). ASan/UBSan turn any over-read or UB into
// a crash.
//
//   ./build-fuzz/tests/fuzz/fuzz_gguf -max_total_time=60 tests/fuzz/corpus/gguf

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"
#include "engine/plan/fit.h"

namespace {

using namespace shoal::gguf;

// Reads a value through every accessor so each variant alternative is touched.
size_t touch(const Value& v) {
  size_t sink = static_cast<size_t>(v.type);
  sink += v.asInt().value_or(0) != 0;
  sink += v.asUInt().value_or(0) != 0;
  sink += v.asFloat().value_or(0.0) != 0.0;
  sink += v.asBool().value_or(false);
  if (const std::string* s = v.asString()) sink += s->size();
  if (const Array* a = v.asArray()) {
    sink += static_cast<size_t>(a->elementType);
    for (const Value& item : a->items) sink += touch(item);
  }
  return sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const File f = File::fromBuffer(std::span<const uint8_t>(data, size), "fuzz.gguf");
    volatile size_t sink = f.version() + f.alignment() + f.fileSize();
    for (const KeyValue& kv : f.metadata()) {
      sink = sink + touch(kv.value) + (f.find(kv.key) == &kv.value);
      // Typed getters on every key: either a value or a shoal::Error naming the key.
      try {
        sink = sink + static_cast<size_t>(f.getInt(kv.key));
      } catch (const shoal::Error&) {
      }
      try {
        sink = sink + f.getString(kv.key).size();
      } catch (const shoal::Error&) {
      }
      try {
        sink = sink + (f.getFloat(kv.key) > 0) + f.getBoolOr(kv.key, false);
      } catch (const shoal::Error&) {
      }
    }
    std::vector<float> row;
    for (const TensorInfo& t : f.tensors()) {
      sink = sink + (f.findTensor(t.name) == &t) + static_cast<size_t>(t.rows());
      if (!typeTraits(t.type).dequantizable) continue;
      // The first row lies inside the validated data range, so it is safe to decode.
      row.resize(static_cast<size_t>(t.dims[0]));
      dequantizeRow(t.type, t.data, row.data(), t.dims[0]);
      for (float v : row) sink = sink + (v == 0.0f);
    }
    (void)sink;
  } catch (const shoal::Error&) {
    // Malformed input is expected; only crashes and sanitizer reports are findings.
  }
  // The same bytes as the first half of a larger file (a header fetched by a Range request):
  // parses, asks for more (HeaderIncomplete, a shoal::Error) or is malformed; a parsed header goes
  // through the fit estimate, which must answer with a verdict and never throw.
  try {
    const File header =
        File::fromHeader(std::span<const uint8_t>(data, size / 2), size, "fuzz-header.gguf");
    shoal::plan::Pool pool;
    pool.devices.push_back({"cpu", "local", 8e9, 2e10, 1e11});
    const shoal::plan::FitEstimate fit = shoal::plan::estimateFit(header, pool, 4096);
    volatile bool sink = fit.runs;
    (void)sink;
  } catch (const shoal::Error&) {
  }
  return 0;
}
