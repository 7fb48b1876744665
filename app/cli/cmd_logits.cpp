// shoal-cli logits: the top-K (id, logit) pairs at the last position of a prompt, as JSON.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"

namespace shoal::cli {
namespace {

struct LogitsOptions {
  ModelOptions model;
  std::string prompt;
  int top = 10;
};

void runLogits(const LogitsOptions& o) {
  LoadedModel lm = loadModel(o.model);
  const auto ids = lm.model->tokenizer().encode(o.prompt, true, true);
  if (ids.empty()) throw CliExit{2, "the prompt is empty"};
  if (static_cast<int64_t>(ids.size()) > lm.chain->contextLength()) {
    throw CliExit{2, "prompt of " + std::to_string(ids.size()) + " tokens exceeds the context of " +
                         std::to_string(lm.chain->contextLength())};
  }
  std::vector<float> logits;
  lm.chain->forward(0, 0, ids, logits);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(order.size(), static_cast<size_t>(o.top));
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
      [&](int32_t a, int32_t b) {
        return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
               (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
      });
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < k; ++i) top.push_back({order[i], logits[static_cast<size_t>(order[i])]});
  nlohmann::json out = {{"prompt_tokens", ids}, {"top", top}};
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void registerLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "top-K logits at the last prompt position (JSON)");
  addModelOptions(*cmd, o->model);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  cmd->add_option("--top", o->top, "how many")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([o] { runLogits(*o); });
}

}  // namespace shoal::cli
