// Decode and prefill speed of the CUDA backend, as one JSON object on stdout.
//   gpu_bench MODEL.gguf                 benchmark a model file
//   gpu_bench --write-8b PATH            write the synthetic Llama-3-8B-shaped Q4_0 model (hidden
//                                        4096, 32 layers, 32 heads, 8 KV heads, FFN 14336) with
//                                        the project's writer, then benchmark it
// Reports decode tok/s (128 tokens after a 512-token prompt), prefill tok/s (pp512), the weight
// bytes read per decoded token, and the fraction of the H200's 4.8 TB/s HBM bandwidth that
// decode reaches (weight bytes per token x tok/s / 4.8e12; the KV cache is not counted).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "kernels/backend_registry.h"

using namespace shoal;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kH200Bandwidth = 4.8e12;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: gpu_bench MODEL.gguf | gpu_bench --write-8b PATH\n");
    return 2;
  }
  std::string path = argv[argc - 1];
  try {
    auto backend = kernels::createBackend("cuda", {});
    if (!backend->availability().available) {
      std::printf("{\"skipped\": \"cuda backend unavailable: %s\"}\n",
                  backend->availability().reason.c_str());
      return 0;
    }
    if (std::strcmp(argv[1], "--write-8b") == 0) {
      model::SyntheticModelSpec spec;
      spec.name = "synthetic-llama3-8b-q4_0";
      spec.nLayer = 32;
      spec.nEmbd = 4096;
      spec.nHead = 32;
      spec.nHeadKv = 8;
      spec.nFf = 14336;
      spec.nVocab = 32000;
      spec.nCtx = 8192;
      spec.ropeFreqBase = 500000.f;
      spec.weightType = gguf::TensorType::Q4_0;
      spec.embedType = gguf::TensorType::Q4_0;
      const auto t0 = Clock::now();
      model::writeSyntheticModel(spec, path);
      std::fprintf(stderr, "wrote %s in %.1f s\n", path.c_str(), seconds(t0, Clock::now()));
    }
    const auto m = model::Model::load(path);
    const auto& c = m->config();
    const auto devices = backend->devices();
    runtime::ModelSource src{&m->file(), &m->config(), &m->weights()};
    runtime::StageSpec spec;
    spec.lastLayer = c.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 1024;
    spec.maxBatch = 512;
    const auto t0 = Clock::now();
    auto stage = backend->createStage("cuda0", src, spec);
    const double loadS = seconds(t0, Clock::now());

    // Weight bytes one decoded token reads: every layer matrix and the output head (the
    // embedding reads one row).
    double weightBytes = static_cast<double>(m->weights()[model::TensorRole::Output]->nbytes);
    for (const auto& l : m->weights().layers)
      for (const gguf::TensorInfo* t : l.byRole)
        if (t) weightBytes += static_cast<double>(t->nbytes);

    std::vector<int32_t> prompt(512);
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(c.nVocab));
    runtime::StageOutput out;
    runtime::Segment segment{0, 0, 512, runtime::LogitRows::Last};
    runtime::Batch in;
    in.tokens = prompt;
    in.segments = std::span(&segment, 1);
    stage->forward(in, out);  // warm-up (cuBLAS heuristics, first-touch)
    double ppS = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      stage->truncate(0, 0);
      const auto a = Clock::now();
      stage->forward(in, out);
      ppS = std::min(ppS, seconds(a, Clock::now()));
    }
    // Decode 128 tokens after the prompt; the first token records the graph and is not timed.
    int32_t token = 1;
    runtime::Segment one{0, 512, 1, runtime::LogitRows::Last};
    runtime::Batch step;
    step.tokens = std::span<const int32_t>(&token, 1);
    step.segments = std::span(&one, 1);
    stage->forward(step, out);
    const int decodeTokens = 128;
    const auto a = Clock::now();
    for (int i = 0; i < decodeTokens; ++i) {
      one.firstPosition = 513 + i;
      token = (token * 31 + 7) % c.nVocab;
      stage->forward(step, out);
    }
    const double decodeS = seconds(a, Clock::now());
    const double tgTokS = decodeTokens / decodeS;
    std::printf(
        "{\"model\": \"%s\", \"device\": \"%s\", \"measured_copy_bandwidth_Bps\": %.4g, "
        "\"load_s\": %.3f, \"pp512_tok_s\": %.1f, \"decode_tok_s\": %.2f, "
        "\"decode_context\": \"513..640\", \"weight_bytes_per_token\": %.0f, "
        "\"decode_bytes_per_s\": %.4g, \"fraction_of_4_8TBps\": %.3f}\n",
        path.c_str(), devices.empty() ? "?" : devices[0].name.c_str(),
        devices.empty() ? 0.0 : devices[0].bandwidthBytesPerS, loadS, 512.0 / ppS, tgTokS,
        weightBytes, weightBytes * tgTokS, weightBytes * tgTokS / kH200Bandwidth);
  } catch (const std::exception& e) {
    std::printf("{\"error\": \"%s\"}\n", e.what());
    return 1;
  }
  return 0;
}
