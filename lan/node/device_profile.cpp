#include "lan/node/device_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "lan/pool/pool_builder.h"

namespace shoal::lan {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Each probe repeats its pass until this much time has gone by and keeps the best pass: the
// figure the hardware can sustain, with the first (cold) pass and preempted ones ignored.
// Three probes of 0.12 s plus set-up (filling 64 MiB and 66 MB, quantizing the matmul's matrix)
// take about half a second of the node's first start (later starts read the cache).
constexpr double kProbeSeconds = 0.12;

// Larger than any last-level cache of a desktop CPU, so the reads come from DRAM as a decode's
// weight reads do.
constexpr size_t kReadBytes = size_t{64} << 20;

// A matmul the size of a small model's projection, with a prompt-like batch so it is compute
// bound (a 1-token product would measure memory again). Q4_0: the common quantization of the
// models a home pool runs, through the same kernels a stage uses.
constexpr int64_t kMatmulCols = 2048;
constexpr int64_t kMatmulRows = 1024;
constexpr int64_t kMatmulTokens = 32;

// The decode probe: one token through a Q4_0 matrix larger than the caches (28672 x 4096: 66 MB),
// the product a decoded token runs for every weight matrix. Its weight bytes per second is what
// decoding reads at, which on few threads is well below what a plain read reaches (one thread
// here sums 35 GB/s but unpacks and multiplies Q4_0 at about 12).
constexpr int64_t kDecodeCols = 4096;
constexpr int64_t kDecodeRows = 28672;

// Cached entries carry the probe set that made them; older ones (without the decode probe) are
// measured again.
constexpr int kProbeVersion = 2;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `amount` (bytes, FLOPs) over the fastest of the passes `pass` makes in kProbeSeconds.
template <class Pass>
double bestRate(double amount, Pass pass) {
  double best = 0;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    pass();
    const double s = seconds(t0);
    if (s > 0) best = std::max(best, amount / s);
  } while (seconds(start) < kProbeSeconds);
  return best;
}

// Q4_0 rows in `weights` (kept alive by the caller) as the kernels' weight matrix.
cpu::WeightMatrix q4_0Matrix(const std::vector<uint8_t>& weights, int64_t cols, int64_t rows) {
  gguf::TensorInfo tensor;
  tensor.name = "profile.q4_0";
  tensor.type = gguf::TensorType::Q4_0;
  tensor.dims = {cols, rows};
  tensor.nbytes = weights.size();
  tensor.data = weights.data();
  return cpu::WeightMatrix::from(tensor);
}

double measureReadBandwidth(cpu::ThreadPool& pool) {
  const size_t words = kReadBytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words);
  for (size_t i = 0; i < words; ++i) buffer[i] = i;  // faults every page in before timing
  constexpr int64_t kBlockWords = 8192;              // 64 KiB per parallelFor item
  const auto blocks = static_cast<int64_t>(words) / kBlockWords;
  struct alignas(64) Sum {
    uint64_t value = 0;
  };
  std::vector<Sum> sums(static_cast<size_t>(pool.size()));
  auto pass = [&](int64_t begin, int64_t end, int thread) {
    // Four independent accumulators so the adds are not one dependency chain.
    uint64_t a = 0, b = 0, c = 0, d = 0;
    const uint64_t* p = buffer.data() + begin * kBlockWords;
    const uint64_t* stop = buffer.data() + end * kBlockWords;
    for (; p < stop; p += 4) {
      a += p[0];
      b += p[1];
      c += p[2];
      d += p[3];
    }
    sums[static_cast<size_t>(thread)].value += a + b + c + d;
  };
  const double best = bestRate(static_cast<double>(blocks * kBlockWords * 8),
                               [&] { pool.parallelFor(blocks, pass); });
  // The sums are the probe's output as far as the optimizer knows.
  uint64_t total = 0;
  for (const Sum& s : sums) total += s.value;
  volatile uint64_t sink = total;
  (void)sink;
  return best;
}

double measureMatmulFlops(cpu::ThreadPool& pool) {
  // Weights and activations of a smooth pattern in [-1, 1]: realistic scales, nothing special
  // (zeros, denormals) for a kernel to skip.
  std::vector<float> row(static_cast<size_t>(kMatmulCols));
  const size_t rowBytes = gguf::rowBytes(gguf::TensorType::Q4_0, kMatmulCols);
  std::vector<uint8_t> weights(rowBytes * static_cast<size_t>(kMatmulRows));
  for (int64_t r = 0; r < kMatmulRows; ++r) {
    for (int64_t c = 0; c < kMatmulCols; ++c) {
      row[static_cast<size_t>(c)] = static_cast<float>(((r * 131 + c * 71) % 257) - 128) / 128.0f;
    }
    gguf::quantizeRow(gguf::TensorType::Q4_0, row.data(), weights.data() + size_t(r) * rowBytes,
                      kMatmulCols);
  }
  const cpu::WeightMatrix w = q4_0Matrix(weights, kMatmulCols, kMatmulRows);
  std::vector<float> x(static_cast<size_t>(kMatmulCols * kMatmulTokens));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(int(i % 199) - 99) / 99.0f;
  std::vector<float> y(static_cast<size_t>(kMatmulRows * kMatmulTokens));
  cpu::MatmulScratch scratch;
  scratch.reserve(w, kMatmulTokens);
  const double flops = 2.0 * double(kMatmulRows) * double(kMatmulCols) * double(kMatmulTokens);
  return bestRate(flops, [&] { cpu::matmul(w, x.data(), kMatmulTokens, y.data(), pool, scratch); });
}

double measureDecodeBytes(cpu::ThreadPool& pool) {
  // Blocks written directly rather than quantized (66 MB would take longer than the probe): a
  // fixed scale (fp16 0.0625) and a varied nibble pattern, so nothing is zero for a kernel to
  // skip.
  const size_t rowBytes = gguf::rowBytes(gguf::TensorType::Q4_0, kDecodeCols);
  std::vector<uint8_t> weights(rowBytes * static_cast<size_t>(kDecodeRows));
  constexpr size_t kBlock = 18;  // Q4_0: fp16 scale + 16 bytes of 32 nibbles (ggml's block_q4_0)
  for (size_t b = 0; b < weights.size() / kBlock; ++b) {
    uint8_t* block = weights.data() + b * kBlock;
    block[0] = 0x00;
    block[1] = 0x2C;
    for (size_t j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((b * 37 + j * 11) & 0xFF);
  }
  const cpu::WeightMatrix w = q4_0Matrix(weights, kDecodeCols, kDecodeRows);
  std::vector<float> x(static_cast<size_t>(kDecodeCols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(int(i % 199) - 99) / 99.0f;
  std::vector<float> y(static_cast<size_t>(kDecodeRows));
  cpu::MatmulScratch scratch;
  scratch.reserve(w, 1);
  return bestRate(static_cast<double>(weights.size()),
                  [&] { cpu::matmul(w, x.data(), 1, y.data(), pool, scratch); });
}

json readCache(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return json::object();
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

double positiveField(const json& entry, const char* key) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number()) return 0;
  const double v = it->get<double>();
  return v > 0 && v < 1e30 ? v : 0;  // rejects NaN too
}

}  // namespace

DeviceProfile measureCpuProfile(int threads) {
  cpu::ThreadPool pool(threads > 0 ? threads : cpu::defaultCpuThreads());
  DeviceProfile p;
  // What decoding reads weights at: the memory, or the kernels when they are slower (few
  // threads), whichever limits.
  p.bandwidthBytesPerS = std::min(measureReadBandwidth(pool), measureDecodeBytes(pool));
  p.flopsPerS = measureMatmulFlops(pool);
  return p;
}

DeviceProfile cachedProfile(const std::filesystem::path& configDir, const std::string& key,
                            bool remeasure, const std::function<DeviceProfile()>& measure) {
  const std::filesystem::path file = configDir / kDeviceProfilesFile;
  json cache = readCache(file);
  if (!remeasure) {
    if (const auto it = cache.find(key);
        it != cache.end() && it->is_object() && it->value("probe", json()) == kProbeVersion) {
      DeviceProfile p;
      p.bandwidthBytesPerS = positiveField(*it, "bandwidth_bytes_per_s");
      p.flopsPerS = positiveField(*it, "flops_per_s");
      if (p.bandwidthBytesPerS > 0 && p.flopsPerS > 0) return p;
    }
  }
  const DeviceProfile p = measure();
  cache[key] = {{"bandwidth_bytes_per_s", p.bandwidthBytesPerS},
                {"flops_per_s", p.flopsPerS},
                {"probe", kProbeVersion}};
  std::error_code ec;
  std::filesystem::create_directories(configDir, ec);
  // Written aside and renamed, so a node killed mid-write leaves the old cache, not half a file.
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << cache.dump(2) << "\n";
    if (!out) return p;
  }
  std::filesystem::rename(tmp, file, ec);
  return p;
}

plan::Pool thisComputerPool(const std::filesystem::path& configDir) {
  static std::mutex mutex;
  static std::optional<DeviceProfile> profile;
  plan::Device d;
  d.id = "this-computer/cpu0";
  d.node = "this-computer";
  d.bandwidthBytesPerS = kFallbackBandwidthBytesPerS;
  d.flopsPerS = kFallbackFlopsPerS;
  try {
    // Default threads, as shoal-node runs: the device name (the cache key) names the count.
    const cpu::CpuBackend backend;
    const int threads = backend.threads();
    const auto devices = backend.devices();
    if (!devices.empty()) {
      d.memoryBytes = static_cast<double>(devices.front().memoryFree);
      const std::lock_guard lock(mutex);
      if (!profile) {
        profile = cachedProfile(configDir, "cpu: " + devices.front().name, false,
                                [threads] { return measureCpuProfile(threads); });
      }
      d.bandwidthBytesPerS = profile->bandwidthBytesPerS;
      d.flopsPerS = profile->flopsPerS;
    }
  } catch (const std::exception&) {
    // Unknown figures: the fallbacks (and no memory: a verdict that says so).
  }
  plan::Pool pool;
  pool.devices.push_back(d);
  return pool;
}

}  // namespace shoal::lan
