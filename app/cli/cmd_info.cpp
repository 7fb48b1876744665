// shoal-cli info: what a GGUF model is — architecture, sizes, quantization, tokenizer, template.

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"
#include "engine/model/kv_footprint.h"
#include "engine/model/parameter_count.h"

namespace shoal::cli {
namespace {

struct InfoOptions {
  std::string model;
  bool json = false;
};

void runInfo(const InfoOptions& o) {
  ModelOptions mo;
  mo.model = o.model;
  LoadedModel lm = loadModel(mo, false);
  const model::Model& m = *lm.model;
  const model::ModelConfig& c = m.config();
  std::map<std::string, int> typeCounts;
  uint64_t bytes = 0;
  for (const auto& t : m.file().tensors()) {
    ++typeCounts[std::string(gguf::typeTraits(t.type).name)];
    bytes += t.nbytes;
  }
  const model::ParameterCount params = model::countParameters(m.file(), c);
  const model::Vocab& v = m.tokenizer().vocab();
  // KV cache of one sequence at the trained context, f16 (kv_footprint.h: a sliding-window
  // layer counts its ring), and how many layers keep a ring at that context.
  const uint64_t kvBytes = model::kvCacheBytes(c, 0, c.nLayer, c.nCtxTrain, 1);
  int ringLayers = 0, ringPositions = 0;
  for (int32_t l = 0; l < c.nLayer; ++l) {
    const model::LayerKv kv = model::layerKv(c, l);
    if (kv.window > 0 && kv.window < c.nCtxTrain) {
      ++ringLayers;
      ringPositions = kv.window;
    }
  }
  // LongRoPE is no rope.scaling.type: the converter writes its factor tensors instead.
  const std::string ropeScaling = m.file().findTensor("rope_factors_long.weight") ? "longrope"
                                  : c.ropeScaling == model::RopeScaling::Yarn     ? "yarn"
                                  : c.ropeScaling == model::RopeScaling::Linear   ? "linear"
                                                                                  : "none";
  nlohmann::json j = {
      {"file", m.path().string()},
      {"file_bytes", m.file().fileSize()},
      {"gguf_version", m.file().version()},
      {"name", c.name},
      {"architecture", c.architecture},
      {"parameters", params.total},
      {"active_parameters", params.active},
      {"experts", c.nExpert},
      {"experts_used", c.nExpertUsed},
      {"expert_feed_forward", c.nFfExp},
      {"tensor_bytes", bytes},
      {"layers", c.nLayer},
      {"embedding", c.nEmbd},
      {"feed_forward", c.nFf},
      {"heads", c.nHead},
      {"kv_heads", c.nHeadKv},
      {"head_dim", c.headDim},
      {"context_length", c.nCtxTrain},
      {"kv_cache_bytes", kvBytes},
      {"kv_ring_layers", ringLayers},
      {"vocab_size", c.nVocab},
      {"rope_freq_base", c.ropeFreqBase},
      {"rope_scaling", ropeScaling},
      {"rope_original_context", c.ropeOrigCtx},
      {"tied_output", c.tiedOutput},
      {"tensor_types", typeCounts},
      {"tokenizer",
       {{"model", v.model}, {"pre", v.pre}, {"tokens", v.tokens.size()}, {"add_bos", v.addBos}}},
      {"chat_template", std::string(model::chatFormatName(m.chatTemplate().format))}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("file           %s (%.1f MiB, GGUF v%u)\n", m.path().string().c_str(),
              static_cast<double>(m.file().fileSize()) / (1 << 20), m.file().version());
  std::printf("model          %s\n", c.name.c_str());
  std::printf("architecture   %s, %d layers, embedding %d, FFN %d, heads %d (kv %d, dim %d)\n",
              c.architecture.c_str(), c.nLayer, c.nEmbd, c.nFf, c.nHead, c.nHeadKv, c.headDim);
  if (c.nExpert > 0) {
    std::printf("experts        %d per layer, %d per token, FFN %d each\n", c.nExpert,
                c.nExpertUsed, c.nFfExp);
  }
  std::printf("parameters     %.1f M in %zu tensors", static_cast<double>(params.total) / 1e6,
              m.file().tensors().size());
  if (params.active != params.total) {
    std::printf(", %.1f M active per token", static_cast<double>(params.active) / 1e6);
  }
  std::printf("\n");
  std::printf("context        %d (RoPE base %.0f", c.nCtxTrain, c.ropeFreqBase);
  if (ropeScaling != "none") {
    std::printf(", %s scaling over %d original positions", ropeScaling.c_str(), c.ropeOrigCtx);
  }
  std::printf(")\n");
  std::printf("KV cache       %.1f MiB per sequence at %d positions (f16", kvBytes / 1048576.0,
              c.nCtxTrain);
  if (ringLayers > 0) {
    std::printf("; %d sliding-window layers keep rings of %d", ringLayers, ringPositions);
  }
  std::printf(")\n");
  std::string types;
  for (const auto& [name, n] : typeCounts) types += name + "×" + std::to_string(n) + " ";
  std::printf("tensor types   %s\n", types.c_str());
  std::printf("tokenizer      %s (pre: %s), %zu tokens, add BOS: %s\n", v.model.c_str(),
              v.pre.c_str(), v.tokens.size(), v.addBos ? "yes" : "no");
  std::printf("chat template  %s\n",
              std::string(model::chatFormatName(m.chatTemplate().format)).c_str());
  std::printf("output         %s\n", c.tiedOutput ? "tied to the token embedding" : "separate");
}

}  // namespace

void registerInfoCommand(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "describe a GGUF model");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the default model)");
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->callback([o] { runInfo(*o); });
}

}  // namespace shoal::cli
