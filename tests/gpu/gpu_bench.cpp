// Decode and prefill speed of a GPU backend, as one JSON object on stdout.
//   gpu_bench [--backend cuda] [--peak-Bps B] MODEL.gguf   benchmark a model file
//   gpu_bench [...] --write-8b PATH      write the synthetic Llama-3-8B-shaped Q4_0 model (hidden
//                                        4096, 32 layers, 32 heads, 8 KV heads, FFN 14336) with
//                                        the project's writer, then benchmark it (with
//                                        --write-only: write it and stop, no backend needed)
// Reports decode tok/s (128 tokens after a 512-token prompt), prefill tok/s (pp512), the weight
// bytes read per decoded token, and the bandwidth decode reaches (weight bytes per token x
// tok/s; the KV cache is not counted) as a fraction of the device's measured copy bandwidth and,
// with --peak-Bps, of the memory's nominal peak (an H200's HBM3e: 4.8e12).

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "kernels/backend_registry.h"
#include "tests/gpu/gpu_check.h"

using namespace shoal;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: gpu_bench [--backend cuda] [--peak-Bps B] (MODEL.gguf | [--write-only] "
               "--write-8b PATH)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backendName = "cuda";
  std::string path;
  bool write8b = false;
  bool writeOnly = false;
  double peakBps = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--backend" || a == "--peak-Bps" || a == "--write-8b") && i + 1 >= argc) {
      return usage();
    }
    if (a == "--backend") {
      backendName = argv[++i];
    } else if (a == "--peak-Bps") {
      char* end = nullptr;
      peakBps = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(peakBps > 0)) return usage();
    } else if (a == "--write-only") {
      writeOnly = true;
    } else if (a == "--write-8b") {
      write8b = true;
      path = argv[++i];
    } else if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
    } else {
      return usage();
    }
  }
  if (path.empty() || (writeOnly && !write8b)) return usage();
  try {
    if (write8b) {
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
      if (writeOnly) return 0;
    }
    auto backend = kernels::createBackend(backendName, {});
    if (!backend->availability().available) {
      std::printf("{\"skipped\": \"%s backend unavailable: %s\"}\n", backendName.c_str(),
                  gpu_test::jsonEscape(backend->availability().reason).c_str());
      return 0;
    }
    const auto m = model::Model::load(path);
    const auto& c = m->config();
    const auto devices = backend->devices();
    if (devices.empty()) throw Error(backendName + " backend lists no device");
    runtime::ModelSource src{&m->file(), &m->config(), &m->weights()};
    runtime::StageSpec spec;
    spec.lastLayer = c.nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 1024;
    spec.maxBatch = 512;
    const auto t0 = Clock::now();
    auto stage = backend->createStage(devices.front().id, src, spec);
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
    const double copyBps = devices.front().bandwidthBytesPerS;
    const double decodeBps = weightBytes * tgTokS;
    std::printf(
        "{\"model\": \"%s\", \"backend\": \"%s\", \"device\": \"%s\", "
        "\"measured_copy_bandwidth_Bps\": %.4g, \"load_s\": %.3f, \"pp512_tok_s\": %.1f, "
        "\"decode_tok_s\": %.2f, \"decode_context\": \"513..640\", "
        "\"weight_bytes_per_token\": %.0f, \"decode_bytes_per_s\": %.4g, "
        "\"fraction_of_copy_bandwidth\": %.3f, \"peak_Bps\": %.4g, \"fraction_of_peak\": %.3f}\n",
        gpu_test::jsonEscape(path).c_str(), backendName.c_str(),
        gpu_test::jsonEscape(devices.front().name).c_str(), copyBps, loadS, 512.0 / ppS, tgTokS,
        weightBytes, decodeBps, copyBps > 0 ? decodeBps / copyBps : 0.0, peakBps,
        peakBps > 0 ? decodeBps / peakBps : 0.0);
  } catch (const std::exception& e) {
    std::printf("{\"error\": \"%s\"}\n", gpu_test::jsonEscape(e.what()).c_str());
    return 1;
  }
  return 0;
}
