#pragma once
// "Will this model run here, and how fast?" — answered from a GGUF header alone (metadata and
// the tensor table, no weights), before anything is downloaded or loaded, for one machine or a
// whole pool. The model library (app, `shoal-cli models files`) shows it for every file it lists.
//
// The answer is the planner's: the model's costs (model_cost.h) planned on the pool (planner.h)
// for one chat (one pipeline, one sequence). So it says the same as a later `pool plan` or load
// would: a verdict of "runs" means the planner finds a feasible placement, and the predicted
// decode speed is that plan's throughput.

#include <cstdint>
#include <string>

#include "engine/plan/types.h"

namespace shoal::gguf {
class File;
}

namespace shoal::plan {

struct FitEstimate {
  bool runs = false;
  // Why it does not run, for a person: "…: unsupported architecture 'mamba' (supported: …)",
  // "…: the model is split into 3 files, …", "tensor … has type IQ2_XXS, which Shoal cannot
  // compute with", the planner's "the model needs 12.40 GiB (weights, embedding, head and KV
  // cache for 1 x 4096 tokens) but the pool has 7.80 GiB: 4.60 GiB missing". Empty when it runs.
  std::string reason;
  std::string architecture;   // general.architecture ("" when unreadable)
  int64_t contextTokens = 0;  // the context the estimate is for (min(requested, trained))
  double weightBytes = 0;     // every tensor of the file
  double kvCacheBytes = 0;    // of one sequence at contextTokens
  double availableBytes = 0;  // memory of every device of the pool together
  double missingBytes = 0;    // > 0 when it is short of memory
  double tokensPerS = 0;      // predicted decode speed of one chat; 0 when it does not run
  int stages = 0;             // devices the plan uses; 0 when it does not run
};

// `header` may be a whole file (gguf::File::open) or a header prefix (gguf::File::fromHeader).
// `contextTokens` is what the caller would load with (the app and CLI: 4096); the estimate uses
// min(contextTokens, the model's trained context). `pool` holds the devices it may use: this
// computer alone, or the current pool's members; node pairs without a measured link (and no
// Pool::defaultLink) are taken as wired gigabit. Never throws for a bad or unsupported model:
// that is a verdict with a reason.
FitEstimate estimateFit(const gguf::File& header, const Pool& pool, int64_t contextTokens);

// "12.4 GiB", "96.0 MiB": sizes in verdicts.
std::string formatBytes(double bytes);

}  // namespace shoal::plan
