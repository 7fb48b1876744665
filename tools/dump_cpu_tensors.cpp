// shoal-dump-tensors: run token ids through a model on the CPU backend and write every
// intermediate tensor the CPU stage reports (CpuStage::setTensorObserver: names as llama.cpp's
// graph callbacks give them, "attn_norm-0", "Qcur-0", ..., "result_output"), for op-by-op
// comparison with llama.cpp (tools/llamacpp/compare_ops.py).
//
//   shoal-dump-tensors --model M.gguf --ids 1,2,3 --out DIR
//       [--prefix 4,5,6] [--ctx 512] [--threads 2]
//
// --prefix ids are evaluated first, unrecorded (for a decode step's comparison: the prompt and
// earlier steps as the prefix, one id as --ids). --ids are evaluated as one batch. DIR gets
// tensors.f32 (every tensor's rows x cols floats, row-major, little-endian, one after another)
// and index.json ({"tensors": [{"name", "layer", "rows", "cols", "offset"}...]}, in the order
// they were produced; offset in floats; layer -1 for the head).
//
// Exit status: 0 written, 1 the model could not be run or the files written, 2 bad command line.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_stage.h"
#include "kernels/cpu/thread_pool.h"

namespace {

// Parses "1,2,3" into ids; throws CLI::ValidationError naming the option.
std::vector<int32_t> parseIds(const std::string& text, const char* option) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw CLI::ValidationError(option, "expected comma-separated token ids, got '" + item + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  std::string modelPath, idsText, prefixText, outDir;
  int32_t contextLength = 512;
  int threads = 2;
  CLI::App app{
      "Run token ids through a model on the CPU backend and write its intermediate "
      "tensors (names as llama.cpp's graph callbacks give them)"};
  app.add_option("--model", modelPath, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--ids", idsText, "token ids evaluated as one batch, comma-separated")->required();
  app.add_option("--prefix", prefixText, "token ids evaluated first, not recorded");
  app.add_option("--ctx", contextLength, "KV-cache positions (llama.cpp's n_ctx)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", threads, "CPU threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--out", outDir, "directory for index.json and tensors.f32")->required();
  std::vector<int32_t> ids, prefix;
  try {
    app.parse(argc, argv);
    ids = parseIds(idsText, "--ids");
    if (ids.empty()) throw CLI::ValidationError("--ids", "no token ids");
    if (!prefixText.empty()) prefix = parseIds(prefixText, "--prefix");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    using namespace shoal;
    const gguf::File file = gguf::File::open(modelPath);
    const model::ModelConfig config = model::ModelConfig::fromGguf(file);
    const model::ModelWeights weights = model::ModelWeights::bind(file, config);
    for (const int32_t id : ids) {
      if (id >= config.nVocab) throw Error("token id " + std::to_string(id) + " >= vocabulary");
    }
    for (const int32_t id : prefix) {
      if (id >= config.nVocab) throw Error("token id " + std::to_string(id) + " >= vocabulary");
    }
    if (prefix.size() + ids.size() > static_cast<size_t>(contextLength)) {
      throw Error("--prefix and --ids hold more than --ctx positions");
    }
    runtime::StageSpec spec;
    spec.lastLayer = config.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = contextLength;
    spec.maxBatch = static_cast<int32_t>(std::max(ids.size(), prefix.size()));
    const runtime::ModelSource source{&file, &config, &weights};
    auto stage =
        std::make_unique<cpu::CpuStage>(source, spec, std::make_shared<cpu::ThreadPool>(threads));
    cpu::CpuStage* cpuStage = stage.get();
    // Read the weights where a settled stage reads them (the huge-page copy, in row groups where
    // the kernel level has them), not from wherever the background copy happens to be: the same
    // bits either way, and test_cpu_aarch64_qemu then covers the grouped kernels every run.
    cpuStage->settle();
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(std::move(stage));
    runtime::Chain chain(std::move(stages));

    std::vector<float> logits;
    if (!prefix.empty()) chain.forward(0, 0, prefix, logits);

    std::filesystem::create_directories(outDir);
    const std::filesystem::path dataPath = std::filesystem::path(outDir) / "tensors.f32";
    std::ofstream data(dataPath, std::ios::binary | std::ios::trunc);
    if (!data) throw Error("cannot write " + dataPath.string());
    nlohmann::json index = nlohmann::json::array();
    int64_t offset = 0;
    cpuStage->setTensorObserver(
        [&](std::string_view name, int32_t layer, const float* values, int64_t rows, int64_t cols) {
          data.write(reinterpret_cast<const char*>(values),
                     static_cast<std::streamsize>(rows * cols * sizeof(float)));
          index.push_back({{"name", std::string(name)},
                           {"layer", layer},
                           {"rows", rows},
                           {"cols", cols},
                           {"offset", offset}});
          offset += rows * cols;
        });
    chain.forward(0, static_cast<int32_t>(prefix.size()), ids, logits);
    cpuStage->setTensorObserver({});
    data.close();
    if (!data) throw Error("cannot write " + dataPath.string());
    const std::filesystem::path indexPath = std::filesystem::path(outDir) / "index.json";
    std::ofstream indexFile(indexPath, std::ios::trunc);
    indexFile << nlohmann::json{{"model", modelPath}, {"tensors", index}}.dump(1) << "\n";
    if (!indexFile) throw Error("cannot write " + indexPath.string());
    std::printf("%zu tensors written to %s\n", index.size(), outDir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-dump-tensors: %s\n", e.what());
    return 1;
  }
  return 0;
}
