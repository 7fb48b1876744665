// End to end on a real model: greedy decoding of 64 tokens with one CPU stage and with one CUDA
// stage (loaded through the plugin loader, as the app does) must give the same tokens; the
// prompt's logits are compared with normalized MSE as well, and a batch of two sequences with
// what they give one at a time. Usage: gpu_model_check MODEL.gguf

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
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

// One sequence's tokens at positions [position, position + tokens.size()), logits of the last.
void forwardTokens(runtime::Stage& stage, int32_t sequence, int32_t position,
                   std::span<const int32_t> tokens, runtime::StageOutput& out) {
  const runtime::Segment segment{sequence, position, static_cast<int32_t>(tokens.size()),
                                 runtime::LogitRows::Last};
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.segments = std::span(&segment, 1);
  stage.forward(batch, out);
}

std::unique_ptr<runtime::Stage> wholeModelStage(runtime::Backend& backend,
                                                const std::string& device, const model::Model& m,
                                                int32_t sequences) {
  runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = m.config().nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = 512;
  spec.maxSequences = sequences;
  return backend.createStage(device, src, spec);
}

// Prompt once (a batch), then 64 greedy tokens one at a time. Returns the tokens; firstLogits
// receives the logits after the prompt.
std::vector<int32_t> greedy(runtime::Backend& backend, const std::string& device,
                            const model::Model& m, const std::vector<int32_t>& prompt, int steps,
                            std::vector<float>& firstLogits) {
  auto stage = wholeModelStage(backend, device, m, 1);
  runtime::StageOutput out;
  forwardTokens(*stage, 0, 0, prompt, out);
  firstLogits = out.logits;
  std::vector<int32_t> tokens;
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmaxOf(out.logits);
    tokens.push_back(next);
    forwardTokens(*stage, 0, pos++, std::span<const int32_t>(&tokens.back(), 1), out);
  }
  return tokens;
}

// Two sequences in one batch (a prompt and a one-token decode, every prompt row's logits for
// the first) must give what the two give one at a time: the stage runs segment by segment.
void checkSegments(gpu_test::Tally& tally, runtime::Backend& backend, const model::Model& m,
                   const std::vector<int32_t>& prompt) {
  const int32_t n = static_cast<int32_t>(prompt.size());
  auto alone = wholeModelStage(backend, "cuda0", m, 2);
  runtime::StageOutput a, b;
  forwardTokens(*alone, 1, 0, prompt, b);  // sequence 1 holds the prompt already
  runtime::Segment all{0, 0, n, runtime::LogitRows::All};
  runtime::Batch first;
  first.tokens = prompt;
  first.segments = std::span(&all, 1);
  alone->forward(first, a);
  const int32_t next = argmaxOf(b.logits);
  runtime::StageOutput c;
  forwardTokens(*alone, 1, n, std::span<const int32_t>(&next, 1), c);
  std::vector<float> want = a.logits;
  want.insert(want.end(), c.logits.begin(), c.logits.end());

  auto together = wholeModelStage(backend, "cuda0", m, 2);
  runtime::StageOutput ignored, got;
  forwardTokens(*together, 1, 0, prompt, ignored);
  std::vector<int32_t> tokens = prompt;
  tokens.push_back(next);
  const runtime::Segment segments[] = {all, {1, n, 1, runtime::LogitRows::Last}};
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.segments = segments;
  together->forward(batch, got);
  const double e = gpu_test::nmse(got.logits, want);
  tally.expect(e <= 1e-12 && got.tokens.empty(), "two sequences in one batch == one at a time",
               "nmse=" + std::to_string(e) + ", " + std::to_string(got.logits.size()) + " logits");
  tally.expect(alone->cachedPositions(1) == n + 1 && together->cachedPositions(0) == n,
               "cached positions follow the segments", "");
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
    checkSegments(tally, *cudaBackend, *m, prompt);
  } catch (const std::exception& e) {
    tally.fail("gpu_model_check", e.what());
  }
  return tally.finish();
}
