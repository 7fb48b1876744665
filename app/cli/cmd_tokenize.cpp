// shoal-cli tokenize: the token ids of a text as a JSON array. BOS is added only when the model
// adds one by default, and special-token text is parsed, as llama.cpp's tokenizer tool does.

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"

namespace shoal::cli {
namespace {

struct TokenizeOptions {
  ModelOptions model;
  std::string prompt;
  bool noParseSpecial = false;
  bool noAddSpecial = false;
};

}  // namespace

void registerTokenizeCommand(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text as JSON");
  cmd->add_option("-m,--model", o->model.model, "GGUF model file (default: the default model)");
  cmd->add_option("-p,--prompt", o->prompt, "text")->required();
  cmd->add_flag("--no-parse-special", o->noParseSpecial, "treat special-token text as plain text");
  cmd->add_flag("--no-add-special", o->noAddSpecial, "never add BOS/EOS");
  cmd->callback([o] {
    LoadedModel lm = loadModel(o->model, false);
    const auto ids = lm.model->tokenizer().encode(o->prompt, !o->noAddSpecial, !o->noParseSpecial);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  });
}

}  // namespace shoal::cli
