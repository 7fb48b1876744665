// shoal-cli generate: raw completion of a prompt (no chat template); prints only the new text.

#include <cstdio>
#include <memory>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"
#include "engine/error.h"
#include "engine/runtime/session.h"

namespace shoal::cli {
namespace {

struct GenerateOptions {
  ModelOptions model;
  CompletionOptions completion;
  std::string draftModel;  // --draft-model
  bool verbose = false;
};

void runGenerate(const GenerateOptions& o) {
  LoadedModel lm = loadModel(o.model);
  // Which file -m's default picked (engine/model/default_model.h): the packaging test checks it.
  if (o.verbose) std::fprintf(stderr, "[model %s]\n", lm.model->path().string().c_str());
  const model::Tokenizer& tok = lm.model->tokenizer();
  const auto prompt = o.completion.encodePrompt(tok);

  runtime::Session session(*lm.chain, tok);
  const runtime::GenerateOptions g = o.completion.generateOptions();
  const auto draft = g.lookup.maxDraft > 0 ? loadDraftModel(o.draftModel, lm.model->path(), tok,
                                                            o.model.threads, o.verbose)
                                           : nullptr;
  if (draft) session.setDrafter(draft->drafter.get());
  runtime::GenerateResult r;
  try {
    r = session.generate(prompt, g, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  if (o.verbose) {
    const double tgs = r.tokens.size() > 1 && r.decodeSeconds > 0
                           ? static_cast<double>(r.tokens.size() - 1) / r.decodeSeconds
                           : 0.0;
    std::fprintf(stderr,
                 "\n[prompt %d tokens in %.3f s, %zu tokens generated, %.2f tok/s, finish: %s, "
                 "seed %llu, drafts accepted %d/%d in %d verifying steps, of a draft model "
                 "%d/%d]\n",
                 r.promptTokens, r.prefillSeconds, r.tokens.size(), tgs,
                 std::string(runtime::finishReasonName(r.finish)).c_str(),
                 static_cast<unsigned long long>(o.completion.sampler.seed), r.acceptedTokens,
                 r.draftedTokens, r.verifySteps, r.modelAcceptedTokens, r.modelDraftedTokens);
  }
}

}  // namespace

void registerGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "complete a prompt (no chat template)");
  addModelOptions(*cmd, o->model);
  addCompletionOptions(*cmd, o->completion);
  addDraftModelOption(*cmd, o->draftModel, "none");
  cmd->add_flag("-v,--verbose", o->verbose, "print the model's path and timings to stderr");
  cmd->callback([o] { runGenerate(*o); });
}

}  // namespace shoal::cli
