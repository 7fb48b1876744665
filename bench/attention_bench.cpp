// Attention micro-benchmark: one decode step's attention (or a verifying step's, several rows
// of one sequence in decode order) over every layer of a model shape, from an f16 cache of a
// given depth, on a given number of threads. Prints one JSON object.
//
//   attention_bench [--position P] [--rows R] [--threads T] [--layers L] [--heads H]
//                   [--kv-heads K] [--head-dim D] [--context C] [--reps N] [--in-items]
//
// The defaults are SmolLM2-135M's shape (30 layers, 9 heads over 3 KV heads of 64) at the
// 1,628-token depth of bench/code_edit_prompt.py. Each layer has its own cache, laid out as the
// CPU stage keeps it (keys head-major, values transposed), so a step reads as much memory as a
// model's would. --in-items runs every call the way long prompts run (AttentionScratch::
// passBytes = 0), to compare the two. Times: median and minimum over reps, in ms per step.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"

using namespace shoal::cpu;

int main(int argc, char** argv) {
  int32_t position = 1628, rows = 1, threads = 1, layers = 30, heads = 9, kvHeads = 3;
  int32_t headDim = 64, context = 8192, reps = 50;
  bool inItems = false;
  CLI::App app{"Attention micro-benchmark: a decode or verifying step over every layer (JSON)"};
  app.add_option("--position", position, "cached positions before the step")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--rows", rows, "rows of one sequence attended together, in decode order")
      ->check(CLI::Range(1, 64));
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 256));
  app.add_option("--layers", layers, "layers (each with its own cache)")->check(CLI::Range(1, 256));
  app.add_option("--heads", heads, "query heads")->check(CLI::Range(1, 256));
  app.add_option("--kv-heads", kvHeads, "KV heads (a divisor of --heads)")
      ->check(CLI::Range(1, 256));
  app.add_option("--head-dim", headDim, "head dimension")->check(CLI::Range(16, 512));
  app.add_option("--context", context, "positions each cache holds")->check(CLI::Range(1, 1 << 20));
  app.add_option("--reps", reps, "repetitions")->check(CLI::Range(1, 100000));
  app.add_flag("--in-items", inItems, "run every call in items (as long prompts run)");
  CLI11_PARSE(app, argc, argv);
  if (heads % kvHeads != 0) {
    std::fprintf(stderr, "attention_bench: --heads must be a multiple of --kv-heads\n");
    return 2;
  }
  if (position + rows > context) {
    std::fprintf(stderr, "attention_bench: --position + --rows exceeds --context\n");
    return 2;
  }

  AttentionShape s;
  s.nHead = heads;
  s.nHeadKv = kvHeads;
  s.headDim = headDim;
  s.contextLength = context;
  s.scale = 1.0f / std::sqrt(static_cast<float>(headDim));
  s.headMajorKeys = true;
  const KernelTable& k = kernels();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto halfs = [&](size_t n) {
    std::vector<float> f(n);
    for (float& x : f) x = uniform(rng);
    std::vector<uint16_t> h(n);
    k.floatToHalf(f.data(), h.data(), static_cast<int64_t>(n));
    return h;
  };
  std::vector<std::vector<uint16_t>> keys, values;
  for (int32_t l = 0; l < layers; ++l) {
    keys.push_back(halfs(static_cast<size_t>(s.keySlots() * s.kvDim())));
    values.push_back(halfs(static_cast<size_t>(s.valueStride() * s.kvDim())));
  }
  std::vector<float> q(static_cast<size_t>(rows) * heads * headDim), out(q.size());
  for (float& x : q) x = uniform(rng);

  ThreadPool pool(threads);
  AttentionScratch scratch;
  scratch.reserve(s, threads);
  if (inItems) scratch.passBytes = 0;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t l = 0; l < layers; ++l) {
      attention(s, q.data(), rows, position, keys[static_cast<size_t>(l)].data(),
                values[static_cast<size_t>(l)].data(), out.data(), pool, scratch, 1);
    }
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  nlohmann::json report = {
      {"isa", std::string(isaName(k.isa))},
      {"position", position},
      {"rows", rows},
      {"threads", threads},
      {"layers", layers},
      {"heads", heads},
      {"kv_heads", kvHeads},
      {"head_dim", headDim},
      {"context", context},
      {"reps", reps},
      {"in_items", inItems},
      {"kv_bytes_per_step", 2.0 * 2.0 * static_cast<double>(position + rows) * s.kvDim() * layers},
      {"median_ms", ms[ms.size() / 2]},
      {"min_ms", ms.front()}};
  std::printf("%s\n", report.dump(1).c_str());
  return 0;
}
