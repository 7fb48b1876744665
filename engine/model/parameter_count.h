#pragma once
// How many weights a model has, and how many one token computes with: a mixture-of-experts
// layer routes each token through expert_used_count of its expert_count experts, so its stacked
// expert tensors (*_exps) count in full for memory and in that share per token.

#include <cstdint>

namespace shoal::gguf {
class File;
}

namespace shoal::model {

struct ModelConfig;

struct ParameterCount {
  int64_t total = 0;   // elements of every tensor
  int64_t active = 0;  // elements one token uses (= total for a dense model)
};

ParameterCount countParameters(const gguf::File& file, const ModelConfig& config);

}  // namespace shoal::model
