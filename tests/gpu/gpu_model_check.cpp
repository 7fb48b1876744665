// End to end on a real model: greedy decoding of 64 tokens with one CPU stage and with one CUDA
// stage (loaded through the plugin loader, as the app does) must give the same tokens; the
// prompt's logits are compared with normalized MSE as well. Usage: gpu_model_check MODEL.gguf

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "kernels/backend_registry.h"
#include "tests/gpu/gpu_check.h"

using namespace shoal;

namespace {

int32_t argmaxOf(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prompt once (a batch), then 64 greedy tokens one at a time. Returns the tokens; firstLogits
// receives the logits after the prompt.
std::vector<int32_t> greedy(runtime::Backend& backend, const std::string& device,
                            const model::Model& m, const std::vector<int32_t>& prompt, int steps,
                            std::vector<float>& firstLogits) {
  runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = m.config().nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = 512;
  auto stage = backend.createStage(device, src, spec);
  runtime::StageOutput out;
  runtime::StageInput in;
  in.tokens = prompt;
  in.count = static_cast<int32_t>(prompt.size());
  stage->forward(in, out);
  firstLogits = out.logits;
  std::vector<int32_t> tokens;
  int32_t pos = in.count;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmaxOf(out.logits);
    tokens.push_back(next);
    runtime::StageInput step;
    step.tokens = std::span<const int32_t>(&tokens.back(), 1);
    step.count = 1;
    step.firstPosition = pos++;
    stage->forward(step, out);
  }
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_model_check MODEL.gguf\n");
    return 2;
  }
  auto cudaBackend = kernels::createBackend("cuda", {});
  if (!cudaBackend->availability().available) {
    std::printf("SKIP gpu_model_check: cuda backend unavailable: %s\n",
                cudaBackend->availability().reason.c_str());
    return 0;
  }
  gpu_test::Tally tally;
  try {
    const auto m = model::Model::load(argv[1]);
    const auto prompt = m->tokenizer().encode(
        "The capital of France is Paris. The three largest planets of the solar system are", true,
        false);
    auto cpuBackend = kernels::createBackend("cpu", {});
    std::vector<float> cpuLogits, cudaLogits;
    const auto cpuTokens = greedy(*cpuBackend, "cpu0", *m, prompt, 64, cpuLogits);
    const auto cudaTokens = greedy(*cudaBackend, "cuda0", *m, prompt, 64, cudaLogits);
    const double e = gpu_test::nmse(cudaLogits, cpuLogits);
    tally.expect(e <= 5e-4, "prompt logits cuda vs cpu", "nmse=" + std::to_string(e));
    size_t same = 0;
    while (same < cpuTokens.size() && cpuTokens[same] == cudaTokens[same]) ++same;
    tally.expect(same == cpuTokens.size(), "greedy 64 tokens cuda == cpu",
                 std::to_string(same) + " of 64 equal before the first difference");
    std::printf("cpu : ");
    for (int32_t t : cpuTokens) std::printf("%d ", t);
    std::printf("\ncuda: ");
    for (int32_t t : cudaTokens) std::printf("%d ", t);
    std::printf("\n");
  } catch (const std::exception& e) {
    tally.fail("gpu_model_check", e.what());
  }
  return tally.finish();
}
