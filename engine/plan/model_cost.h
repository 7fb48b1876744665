#pragma once
// A model's planner costs (types.h: W, F, K, A, E, H, FH and each layer's LayerCost) from a GGUF
// file's metadata and tensor table, for `shoal-cli plan --model` and the pool coordinator.
//
// Per layer l (blk.l.* tensors; experts are the *_exps tensors):
//   W_l = bytes of blk.l.*
//   R_l = W_l, less (1 − expert_used_count / expert_count) of the expert tensors' bytes
//   F_l = 2 × elements of blk.l.* (one multiply-add per weight; experts scaled as in R_l)
//         + 4 × n_head × head_dim_k × min(C, w_l) (attention scores and weighted values over the
//           context: the cost at the end of the context, the planner's conservative case)
//   K_l, w_l = the layer's KV bytes per position and window from its layer program
//         (engine/model/kv_footprint.h), for registered architectures; otherwise
//         n_head_kv × (head_dim_k + head_dim_v) × 2 bytes (f16 K and V) and no window
// When every layer has the same figures (and no window, no experts) the model is uniform
// (ModelCost::perLayer empty) with W = mean bytes of a layer, F and K as above; otherwise
// perLayer holds them and W, F, K are their means.
//   A  = n_embd × 4 bytes (f32 hidden state)
//   E  = bytes of token_embd.weight
//   H  = bytes of output.weight (token_embd.weight when the head is tied) + output_norm.weight
//   FH = 2 × n_embd × n_vocab
// Metadata: <arch>.block_count, <arch>.embedding_length, <arch>.attention.head_count,
// <arch>.attention.head_count_kv (default head_count), <arch>.attention.key_length /
// value_length (default n_embd / n_head), <arch>.vocab_size or the length of
// tokenizer.ggml.tokens (or the head's row count), <arch>.expert_count and
// <arch>.expert_used_count (default 0: no experts).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/kv_footprint.h"
#include "engine/plan/types.h"

namespace shoal::gguf {
class File;
}

namespace shoal::plan {

// What the cost formulas need from a model file, gathered by modelCostFromGguf (and built by
// hand in tests).
struct ModelFacts {
  std::string arch;
  int64_t blockCount = 0;
  int64_t embeddingLength = 0;
  int64_t headCount = 0;
  int64_t headCountKv = 0;
  int64_t keyLength = 0;        // per head; 0: embeddingLength / headCount
  int64_t valueLength = 0;      // per head; 0: embeddingLength / headCount
  int64_t vocabSize = 0;        // 0: taken from the head tensor's row count
  int64_t expertCount = 0;      // 0: no experts
  int64_t expertUsedCount = 0;  // experts one token goes through
  // Each layer's KV cache from its layer program (blockCount entries), or empty: every layer
  // caches n_head_kv × (key + value length) f16 values per position, with no window.
  std::vector<model::LayerKv> layerKv;
  struct Tensor {
    std::string name;
    size_t bytes = 0;
    int64_t elements = 0;
    int64_t rows = 0;  // product of dims[1..]
  };
  std::vector<Tensor> tensors;
};

// Throws shoal::Error naming what is missing or inconsistent (a key, a tensor, a layer).
ModelCost modelCostFromFacts(const ModelFacts& facts, int64_t contextTokens);

// Reads the facts from the file (metadata keys above; layerKv through model::ModelConfig when
// the architecture is registered) and applies modelCostFromFacts.
ModelFacts modelFactsFromGguf(const gguf::File& file);
ModelCost modelCostFromGguf(const gguf::File& file, int64_t contextTokens);

}  // namespace shoal::plan
