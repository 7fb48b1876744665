// gpu_arch_models DIR: writes a small synthetic model of every architecture and weight type the
// engine loads into DIR and prints their paths, one per line, for gpu_model_check to compare a
// GPU backend with the CPU backend on each (tests/gpu/run_on_device.sh). The shapes are those of
// the CPU's llama.cpp parity fixtures (tests/fixtures/llamacpp_arch.json), so every op a layer
// program has (per-head norms, experts, sliding windows over a ring, soft-capping, sinks, fused
// projections, YaRN and LongRoPE) and every weight type is exercised; the vocabulary is the
// writer's generated one (512 tokens), so nothing needs carrying to the GPU machine. A plain
// executable: the GPU machine has no Qt and no Debian -dev packages.

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/model/synthetic_model.h"

using namespace shoal;
using gguf::TensorType;

namespace {

model::SyntheticModelSpec base(const char* name, const char* arch, int layers, int kvHeads,
                               TensorType type, uint64_t seed) {
  model::SyntheticModelSpec s;
  s.name = name;
  s.architecture = arch;
  s.nLayer = layers;
  s.nEmbd = 256;
  s.nHead = 4;
  s.nHeadKv = kvHeads;
  s.nFf = 512;
  s.nVocab = 512;
  s.nCtx = 512;
  s.weightType = type;
  s.embedType = TensorType::Q8_0;
  s.seed = seed;
  return s;
}

model::SyntheticModelSpec experts(model::SyntheticModelSpec s, int n, int used, int ffExp) {
  s.nExpert = n;
  s.nExpertUsed = used;
  s.nFfExp = ffExp;
  return s;
}

std::vector<model::SyntheticModelSpec> specs() {
  std::vector<model::SyntheticModelSpec> out;
  out.push_back(base("qwen3-q8_0", "qwen3", 4, 2, TensorType::Q8_0, 31));
  out.push_back(
      experts(base("qwen3moe-8x2-q8_0", "qwen3moe", 4, 2, TensorType::Q8_0, 32), 8, 2, 256));
  {
    auto s = experts(base("qwen3moe-8x2-q4_K", "qwen3moe", 3, 2, TensorType::Q4_K, 33), 8, 2, 256);
    s.typeOverrides = {{"ffn_down_exps", TensorType::Q6_K}, {"attn_v", TensorType::Q6_K}};
    out.push_back(s);
  }
  {
    auto s =
        experts(base("qwen3moe-128x8-q4_K", "qwen3moe", 2, 2, TensorType::Q4_K, 34), 128, 8, 256);
    s.nFf = 768;
    out.push_back(s);
  }
  {
    auto s = base("qwen3-yarn-q8_0", "qwen3", 2, 2, TensorType::Q8_0, 36);
    s.ropeScaling = "yarn";
    s.ropeScalingFactor = 4.0f;
    s.ropeOrigCtx = 128;
    out.push_back(s);
  }
  {
    auto s = base("gemma3-swa-q8_0", "gemma3", 3, 1, TensorType::Q8_0, 38);
    s.slidingWindow = 48;
    s.slidingWindowPattern = 3;
    s.ropeFreqBase = 1000000.f;
    s.tiedOutput = true;
    out.push_back(s);
  }
  out.push_back(base("phi3-q8_0", "phi3", 3, 2, TensorType::Q8_0, 39));
  {
    auto s = base("llama-iq4_nl", "llama", 2, 2, TensorType::IQ4_NL, 40);
    s.nFf = 480;
    out.push_back(s);
  }
  {
    auto s = experts(base("llama-moe-8x2-q5_K", "llama", 3, 2, TensorType::Q5_K, 35), 8, 2, 0);
    s.nHead = 8;
    s.typeOverrides = {{"ffn_gate_exps", TensorType::Q4_K}};
    out.push_back(s);
  }
  {
    auto s = experts(base("gpt-oss-32x4-mxfp4", "gpt-oss", 4, 2, TensorType::Q8_0, 41), 32, 4, 224);
    s.slidingWindow = 48;
    s.ropeScaling = "yarn";
    s.ropeScalingFactor = 32.0f;
    s.ropeOrigCtx = 128;
    s.ropeFreqBase = 150000.f;
    s.typeOverrides = {{"ffn_gate_exps", TensorType::MXFP4},
                       {"ffn_up_exps", TensorType::MXFP4},
                       {"ffn_down_exps", TensorType::MXFP4}};
    out.push_back(s);
  }
  {
    auto s = base("gemma2-softcap-q8_0", "gemma2", 2, 2, TensorType::Q8_0, 43);
    s.slidingWindow = 48;
    s.attnLogitSoftcap = 0.2f;
    s.finalLogitSoftcap = 1.0f;
    s.tiedOutput = true;
    out.push_back(s);
  }
  {
    auto s = base("llama-q3_K_m", "llama", 3, 2, TensorType::Q3_K, 44);
    s.typeOverrides = {
        {"attn_v", TensorType::Q5_K}, {"ffn_down", TensorType::Q4_K}, {"output", TensorType::Q6_K}};
    out.push_back(s);
  }
  out.push_back(base("llama-q2_K", "llama", 2, 2, TensorType::Q2_K, 45));
  out.push_back(
      experts(base("qwen3moe-8x2-iq4_xs", "qwen3moe", 2, 2, TensorType::IQ4_XS, 46), 8, 2, 256));
  {
    auto s = base("phi3-longrope-long-q8_0", "phi3", 2, 2, TensorType::Q8_0, 47);
    s.longRope = true;
    s.ropeOrigCtx = 128;
    s.ropeAttnFactor = 1.1339f;
    out.push_back(s);
  }
  // The 32-element types of the older llama files (not among the parity fixtures).
  out.push_back(base("llama-q5_0", "llama", 2, 2, TensorType::Q5_0, 49));
  out.push_back(base("llama-q5_1", "llama", 2, 2, TensorType::Q5_1, 50));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gpu_arch_models DIR\n");
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    for (const model::SyntheticModelSpec& spec : specs()) {
      const std::string path = (dir / (spec.name + ".gguf")).string();
      if (!std::filesystem::exists(path)) model::writeSyntheticModel(spec, path);
      std::printf("%s\n", path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_arch_models: %s\n", e.what());
    return 1;
  }
  return 0;
}
