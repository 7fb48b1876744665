#pragma once
// A model's planner costs (W, F, K, A, E, H, FH; types.h) from a GGUF file's metadata and
// tensor table, for `shoal-cli plan --model`.
//
//   W  = bytes of all blk.N.* tensors / block_count (mean bytes of a layer)
//   F  = 2 × elements of one layer's tensors (one multiply-add per weight)
//        + 4 × n_head × head_dim_k × C (attention scores and weighted values over C tokens of
//          context: the cost at the end of the context, the planner's conservative case)
//   K  = n_head_kv × (head_dim_k + head_dim_v) × 2 bytes (f16 K and V cache)
//   A  = n_embd × 4 bytes (f32 hidden state)
//   E  = bytes of token_embd.weight
//   H  = bytes of output.weight (token_embd.weight when the head is tied) + output_norm.weight
//   FH = 2 × n_embd × n_vocab
// Metadata: <arch>.block_count, <arch>.embedding_length, <arch>.attention.head_count,
// <arch>.attention.head_count_kv (default head_count), <arch>.attention.key_length /
// value_length (default n_embd / n_head), <arch>.vocab_size or the length of
// tokenizer.ggml.tokens (or the head's row count).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
  int64_t keyLength = 0;    // per head; 0: embeddingLength / headCount
  int64_t valueLength = 0;  // per head; 0: embeddingLength / headCount
  int64_t vocabSize = 0;    // 0: taken from the head tensor's row count
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

// Reads the facts from the file (metadata keys above) and applies modelCostFromFacts.
ModelFacts modelFactsFromGguf(const gguf::File& file);
ModelCost modelCostFromGguf(const gguf::File& file, int64_t contextTokens);

}  // namespace shoal::plan
