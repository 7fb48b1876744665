#include "engine/model/tensor_table.h"

#include "engine/error.h"
#include "engine/model/architecture.h"
#include "engine/model/model_config.h"

namespace shoal::model {

std::string_view tensorRoleName(TensorRole role) {
  switch (role) {
    case TensorRole::TokenEmbd:
      return "token_embd";
    case TensorRole::OutputNorm:
      return "output_norm";
    case TensorRole::Output:
      return "output";
    case TensorRole::RopeFreqs:
      return "rope_freqs";
    case TensorRole::RopeFactorsLong:
      return "rope_factors_long";
    case TensorRole::RopeFactorsShort:
      return "rope_factors_short";
    case TensorRole::AttnNorm:
      return "attn_norm";
    case TensorRole::Wq:
      return "attn_q";
    case TensorRole::Wk:
      return "attn_k";
    case TensorRole::Wv:
      return "attn_v";
    case TensorRole::Wqkv:
      return "attn_qkv";
    case TensorRole::Wo:
      return "attn_output";
    case TensorRole::Bq:
      return "attn_q.bias";
    case TensorRole::Bk:
      return "attn_k.bias";
    case TensorRole::Bv:
      return "attn_v.bias";
    case TensorRole::Bo:
      return "attn_output.bias";
    case TensorRole::AttnSinks:
      return "attn_sinks";
    case TensorRole::QNorm:
      return "attn_q_norm";
    case TensorRole::KNorm:
      return "attn_k_norm";
    case TensorRole::FfnNorm:
      return "ffn_norm";
    case TensorRole::AttnPostNorm:
      return "attn_post_norm";
    case TensorRole::FfnPostNorm:
      return "ffn_post_norm";
    case TensorRole::WGate:
      return "ffn_gate";
    case TensorRole::WUp:
      return "ffn_up";
    case TensorRole::WDown:
      return "ffn_down";
    case TensorRole::GateInp:
      return "ffn_gate_inp";
    case TensorRole::GateExps:
      return "ffn_gate_exps";
    case TensorRole::UpExps:
      return "ffn_up_exps";
    case TensorRole::DownExps:
      return "ffn_down_exps";
    case TensorRole::GateInpBias:
      return "ffn_gate_inp.bias";
    case TensorRole::GateExpsBias:
      return "ffn_gate_exps.bias";
    case TensorRole::UpExpsBias:
      return "ffn_up_exps.bias";
    case TensorRole::DownExpsBias:
      return "ffn_down_exps.bias";
    case TensorRole::Count:
      break;
  }
  return "?";
}

int64_t dimValue(Dim dim, const ModelConfig& c) {
  switch (dim) {
    case Dim::One:
      return 1;
    case Dim::Embd:
      return c.nEmbd;
    case Dim::QDim:
      return c.qDim();
    case Dim::KvDim:
      return c.kvDim();
    case Dim::Ff:
      return c.nFf;
    case Dim::Vocab:
      return c.nVocab;
    case Dim::HeadDim:
      return c.headDim;
    case Dim::RotHalf:
      return c.nRot / 2;
    case Dim::FfExp:
      return c.nFfExp;
    case Dim::Experts:
      return c.nExpert;
    case Dim::QkvDim:
      return c.qDim() + 2 * c.kvDim();
    case Dim::Ff2:
      return 2 * c.nFf;
    case Dim::Heads:
      return c.nHead;
  }
  return 0;
}

std::vector<int64_t> specDims(const TensorSpec& spec, const ModelConfig& config) {
  size_t n = spec.shape.size();
  while (n > 1 && spec.shape[n - 1] == Dim::One) --n;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < n; ++i) dims.push_back(dimValue(spec.shape[i], config));
  return dims;
}

namespace {

bool formMatches(FfnForm form, const ModelConfig& c) {
  switch (form) {
    case FfnForm::Any:
      return true;
    case FfnForm::Dense:
      return c.nExpert == 0;
    case FfnForm::Experts:
      return c.nExpert > 0;
  }
  return false;
}

}  // namespace

std::vector<StageTensor> stageTensors(const ModelConfig& config, int32_t firstLayer,
                                      int32_t lastLayer, bool embedding, bool head) {
  // config.arch, not architectureOf(): this file is also compiled into the CUDA plugin, which
  // does not link the registry.
  if (!config.arch) throw Error("model config without an architecture");
  const Architecture& arch = *config.arch;
  std::vector<StageTensor> out;
  for (const TensorSpec& t : arch.tensors) {
    if (!formMatches(t.form, config)) continue;
    switch (t.scope) {
      case TensorScope::Embedding:
        // A head without the embedding may need token_embd.weight (a tied output): it is
        // optional there, since a shard's own metadata cannot tell whether the model is tied.
        if (embedding || head) {
          out.push_back({std::string(t.name), t.role, -1, embedding && t.required});
        }
        break;
      case TensorScope::Head:
        if (head) out.push_back({std::string(t.name), t.role, -1, t.required});
        break;
      case TensorScope::Global:
        out.push_back({std::string(t.name), t.role, -1, t.required});
        break;
      case TensorScope::Layer:
        break;
    }
  }
  for (int32_t i = firstLayer; i < lastLayer; ++i) {
    const std::string prefix = "blk." + std::to_string(i) + ".";
    for (const TensorSpec& t : arch.tensors) {
      if (t.scope == TensorScope::Layer && formMatches(t.form, config)) {
        out.push_back({prefix + std::string(t.name), t.role, i, t.required});
      }
    }
  }
  return out;
}

}  // namespace shoal::model
