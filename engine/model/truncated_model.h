#pragma once
// Writes the first layers of a real GGUF model as a model of its own: every metadata key and
// every non-layer tensor (embedding, final norm, output head) copied byte for byte, the tensors
// of blocks [0, layers) copied, `<arch>.block_count` set to `layers`. The result has the real
// tokenizer and the real weights of those layers, so a backend can be checked against the CPU on
// real numbers with a file small enough to travel (the GPU machine's checks carry one of SmolLM2's
// first layers, ~35 MB, where the whole model is 98 MB).
//
// The output is a different model from the source (its logits are not the full model's): compare
// backends with it, never against a reference of the full model.

#include <filesystem>

namespace shoal::model {

// Throws shoal::Error when the source cannot be read, has no `<arch>.block_count`, or has fewer
// than `layers` blocks (or `layers` < 1). Writes through a temporary file and a rename.
void writeTruncatedModel(const std::filesystem::path& source, int layers,
                         const std::filesystem::path& out);

}  // namespace shoal::model
