// CPU kernel micro-benchmark: matrix kernels of every weight type, at every instruction-set
// level this CPU runs, single-threaded (attention: attention_bench.cpp). Prints one JSON object.
//
//   cpu_kernels_bench [--rows R] [--cols C] [--tokens T] [--reps N] [--isa I]... [--type T]...
//
// --isa and --type (repeatable) keep only those levels and weight types: the scalar level alone
// takes most of a full run's time, which matters when alternating binaries in an A/B.
//
// Times are the minimum over reps (the least disturbed run), in microseconds per call, and as
// nanoseconds per 32-element weight block (per token) for the matrix kernels.
//
// A weight type that the level also reads in row groups (row_groups.h; Q4_K at AVX-512) gets a
// second entry, "layout": "row_groups", with "equals_file_layout": whether its outputs equal the
// file layout's bit for bit. "gfni" says whether the group kernels that can use GFNI did.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/dequantize.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/row_groups.h"

using namespace shoal;
using namespace shoal::cpu;

namespace {

template <typename F>
double minMicros(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, us);
  }
  return best;
}

uint8_t* aligned64(uint8_t* p) { return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64; }

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 1536, cols = 576, tokens = 1;
  int reps = 20;
  CLI::App app{"CPU kernel micro-benchmark: every weight type at every SIMD level (JSON)"};
  app.add_option("--rows", rows, "weight rows")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--cols", cols, "elements per row")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--tokens", tokens, "activation rows")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--reps", reps, "repetitions (the minimum is kept)")->check(CLI::Range(1, 10000));
  std::vector<std::string> isaNames, typeNames;
  app.add_option("--isa", isaNames, "only these levels (scalar, avx2, avx512, neon, neondot)");
  app.add_option("--type", typeNames, "only these weight types (q4_0, q4_K, f16, ...)");
  bool vecOrder = false;
  app.add_flag("--vec-order", vecOrder,
               "run every product in the vec order (default: the order matmul() picks for the "
               "shape, as llama.cpp does: tiled, repacked or vec)");
  std::string orderName;
  app.add_option("--order", orderName,
                 "run every product in this order (a type without it computes its own): vec, "
                 "tiled, repacked, repacked-gemm (Q4_K's prompt tokens in whole fours)")
      ->check(CLI::IsMember({"vec", "tiled", "repacked", "repacked-gemm"}));
  CLI11_PARSE(app, argc, argv);
  if (rows * cols > (int64_t{1} << 28) || tokens * cols > (int64_t{1} << 28)) {
    std::fprintf(stderr, "cpu_kernels_bench: at most 2^28 weight or activation elements\n");
    return 2;
  }
  std::vector<gguf::TensorType> types = {
      gguf::TensorType::Q4_0,  gguf::TensorType::Q4_1,   gguf::TensorType::Q5_0,
      gguf::TensorType::Q5_1,  gguf::TensorType::Q8_0,   gguf::TensorType::Q4_K,
      gguf::TensorType::Q5_K,  gguf::TensorType::Q6_K,   gguf::TensorType::Q2_K,
      gguf::TensorType::Q3_K,  gguf::TensorType::IQ4_XS, gguf::TensorType::IQ4_NL,
      gguf::TensorType::MXFP4, gguf::TensorType::F16,    gguf::TensorType::BF16,
      gguf::TensorType::F32};
  std::vector<gguf::TensorType> chosenTypes;
  for (const std::string& name : typeNames) {
    const auto type = gguf::typeFromName(name);
    if (!type || std::find(types.begin(), types.end(), *type) == types.end()) {
      std::fprintf(stderr, "cpu_kernels_bench: no matrix kernel type named '%s'\n", name.c_str());
      return 2;
    }
    chosenTypes.push_back(*type);
  }
  const Isa allIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDot};
  std::vector<Isa> isas;
  for (const std::string& name : isaNames) {
    const Isa* found = std::find_if(std::begin(allIsas), std::end(allIsas),
                                    [&](Isa isa) { return isaName(isa) == name; });
    if (found == std::end(allIsas)) {
      std::fprintf(stderr, "cpu_kernels_bench: no level named '%s'\n", name.c_str());
      return 2;
    }
    isas.push_back(*found);
  }
  if (isas.empty()) isas.assign(std::begin(allIsas), std::end(allIsas));
  if (!chosenTypes.empty()) types = chosenTypes;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(rows * cols)), xf(static_cast<size_t>(tokens * cols));
  for (auto& v : wf) v = dist(rng);
  for (auto& v : xf) v = dist(rng);

  // gfni: whether the AVX-512 Q5_K/Q6_K group kernels use GFNI (SHOAL_CPU_GFNI=0 turns it off).
  nlohmann::json out = {
      {"rows", rows}, {"cols", cols}, {"tokens", tokens}, {"reps", reps}, {"gfni", useGfni()}};
  nlohmann::json results = nlohmann::json::array();
  for (Isa isa : isas) {
    const KernelTable* k = kernelsFor(isa);
    if (!k) continue;
    for (gguf::TensorType type : types) {
      if (cols % gguf::typeTraits(type).blockSize != 0) continue;
      const WeightKind kind = weightKind(type);
      const ActKind actKind = activationKind(kind);
      const size_t wRow = gguf::rowBytes(type, cols);
      const size_t aRow = gguf::rowBytes(activationTensorType(actKind), cols);
      // 64-byte aligned, as the CPU stage's weight copy keeps a GGUF file's (64-byte) tensor
      // offsets: malloc's 16-byte alignment put every 64-byte load of a grouped matrix across two
      // cache lines.
      const size_t wBytes = wRow * static_cast<size_t>(rows);
      std::vector<uint8_t> wStore(wBytes + 64), actStore(aRow * tokens + 64);
      const std::span<uint8_t> w(aligned64(wStore.data()), wBytes);
      uint8_t* const act = aligned64(actStore.data());
      for (int64_t r = 0; r < rows; ++r) {
        gguf::quantizeRow(type, &wf[static_cast<size_t>(r * cols)], &w[wRow * r], cols);
      }
      std::vector<float> y(static_cast<size_t>(rows * tokens));
      GemmArgs g;
      g.weights = w.data();
      g.weightStride = wRow;
      g.act = act;
      g.actStride = aRow;
      g.tokens = tokens;
      g.cols = cols;
      g.y = y.data();
      g.ldy = rows;
      WeightMatrix shape;
      shape.kind = kind;
      shape.rows = shape.tensorRows = rows;
      shape.cols = cols;
      g.order = vecOrder ? DotOrder::Vec : dotOrder(shape, tokens);
      if (orderName == "vec") g.order = DotOrder::Vec;
      if (orderName == "tiled") g.order = DotOrder::Tiled;
      if (orderName == "repacked") g.order = DotOrder::Repacked;
      if (orderName == "repacked-gemm") g.order = DotOrder::RepackedGemm;
      const int useReps = isa == Isa::Scalar ? std::max(2, reps / 10) : reps;
      const double convertUs = minMicros(useReps, [&] {
        for (int64_t t = 0; t < tokens; ++t) {
          k->convert[static_cast<int>(actKind)](&xf[static_cast<size_t>(t * cols)], &act[aRow * t],
                                                cols);
        }
      });
      const double blocks = static_cast<double>(rows) * (cols / 32.0) * static_cast<double>(tokens);
      auto measure = [&](const char* layout) {
        const double gemmUs =
            minMicros(useReps, [&] { k->gemm[static_cast<int>(kind)](g, 0, rows); });
        results.push_back({{"isa", std::string(isaName(isa))},
                           {"type", gguf::typeName(type)},
                           {"layout", layout},
                           {"order", g.order == DotOrder::Vec            ? "vec"
                                     : g.order == DotOrder::Tiled        ? "tiled"
                                     : g.order == DotOrder::RepackedGemm ? "repacked-gemm"
                                                                         : "repacked"},
                           {"gemm_us", gemmUs},
                           {"ns_per_block", gemmUs * 1000.0 / blocks},
                           // Weight bytes read per second (each weight is read once per call).
                           {"weight_gb_per_s", static_cast<double>(w.size()) / (gemmUs * 1000.0)},
                           {"convert_us", convertUs}});
      };
      measure("file");
      // The row-group layout the CPU stage gives this kind where the level reads it
      // (row_groups.h), with whether its results equal the file layout's bit for bit.
      if (k->rowGroups[static_cast<int>(kind)] && rows % kGroupRows == 0) {
        const std::vector<float> fileY = y;
        groupRows(kind, w.data(), rows, cols);
        g.rowGroups = true;
        measure("row_groups");
        results.back()["equals_file_layout"] =
            std::memcmp(fileY.data(), y.data(), y.size() * sizeof(float)) == 0;
        g.rowGroups = false;
      }
    }
  }
  out["results"] = results;
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
