#pragma once
// Hyper-parameters of a transformer, read from GGUF metadata (`<arch>.*` keys): the keys every
// supported architecture shares are read here, the rest by the architecture's own readConfig
// (engine/model/arch/). What an architecture computes is its layer program (layer_program.h).

#include <cstdint>
#include <string>

namespace shoal::gguf {
class File;
}

namespace shoal::model {

struct Architecture;

// How RoPE pairs the dimensions of a head: llama GGUFs have Q/K rows permuted so that adjacent
// dimensions (2i, 2i+1) rotate together ("normal"); qwen2 rotates (i, i + n/2) ("neox").
enum class RopeStyle { Normal, Neox };

enum class RopeScaling { None, Linear, Yarn };

struct ModelConfig {
  std::string architecture;       // general.architecture
  std::string name;               // general.name (may be empty)
  int32_t nLayer = 0;             // block_count
  int32_t nEmbd = 0;              // embedding_length
  int32_t nFf = 0;                // feed_forward_length
  int32_t nHead = 0;              // attention.head_count
  int32_t nHeadKv = 0;            // attention.head_count_kv (GQA; = nHead when absent)
  int32_t headDim = 0;            // attention.key_length, or nEmbd / nHead
  int32_t nVocab = 0;             // vocab_size, or the length of tokenizer.ggml.tokens
  int32_t nCtxTrain = 0;          // context_length
  float rmsEps = 1e-5f;           // attention.layer_norm_rms_epsilon
  int32_t nRot = 0;               // rope.dimension_count (= headDim when absent)
  float ropeFreqBase = 10000.0f;  // rope.freq_base
  float ropeFreqScale = 1.0f;     // 1 / rope.scaling.factor (linear or YaRN scaling)
  RopeScaling ropeScaling = RopeScaling::None;
  // rope.scaling.original_context_length (YaRN; LongRoPE's long/short choice; nCtxTrain)
  int32_t ropeOrigCtx = 0;
  float ropeAttnFactor = 1.0f;  // rope.scaling.attn_factor (scales RoPE's cos and sin)
  // Mixture of experts: 0 experts for a dense model.
  int32_t nExpert = 0;      // expert_count
  int32_t nExpertUsed = 0;  // expert_used_count: experts each token is routed to (top-k)
  int32_t nFfExp = 0;       // expert_feed_forward_length: one expert's FFN width (default nFf)
  // Interleaved sliding-window attention (gemma3): layers with i % pattern < pattern - 1 see
  // only the last slidingWindow positions and turn by RoPE base ropeFreqBaseSwa.
  int32_t slidingWindow = 0;         // attention.sliding_window (0: none)
  int32_t slidingWindowPattern = 0;  // attention.sliding_window_pattern
  float ropeFreqBaseSwa = 10000.0f;  // rope.freq_base_swa
  // Soft-capping (gemma2, gemma3): cap * tanh(x / cap) of the attention scores before the
  // softmax and of the logits; 0: none.
  float attnLogitSoftcap = 0.0f;   // attn_logit_softcapping
  float finalLogitSoftcap = 0.0f;  // final_logit_softcapping
  bool tiedOutput = false;         // no output.weight: the head reuses token_embd.weight
  // RoPE frequency factors present: rope_freqs.weight (llama 3.1), or LongRoPE's
  // rope_factors_long/short pair (phi3), of which a stage takes one (ModelWeights::ropeFactors).
  bool hasRopeFreqs = false;

  const Architecture* arch = nullptr;  // the registered architecture (never null after fromGguf)

  int32_t qDim() const { return nHead * headDim; }
  int32_t kvDim() const { return nHeadKv * headDim; }

  // Read and validate; throws shoal::Error naming the key (unsupported architectures by name).
  static ModelConfig fromGguf(const gguf::File& file);
};

}  // namespace shoal::model
