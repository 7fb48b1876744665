// shoal-cli chat: an interactive, streaming conversation with the model's chat template.
// Reads one user message per line (a terminal or a pipe); /reset starts over, /quit ends.
// When the conversation outgrows the context, the oldest turns are dropped (the policy of
// engine/model/chat_prompt.h) and the user is told so on stderr. A reply's reasoning (a leading
// <think> block: Qwen3, QwQ, DeepSeek-R1) is printed dimmed on a terminal, plainly between
// "[thinking]" lines in a pipe, or not at all with --hide-reasoning.

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "app/cli/cli_support.h"
#include "app/cli/commands.h"
#include "engine/model/chat_prompt.h"
#include "engine/runtime/reasoning_split.h"
#include "engine/runtime/session.h"

namespace shoal::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  std::string system;
  std::string templateName;
  int maxTokens = 512;
  bool hideReasoning = false;
  bool noThink = false;
  std::string reasoningEffort;
  runtime::SamplerParams sampler;
  int draftMax = 8;  // --draft-max: prompt-lookup speculation of greedy replies (--temp 0)
};

class ChatLoop {
 public:
  ChatLoop(const ChatOptions& o, LoadedModel& lm)
      : m_options(o), m_lm(lm), m_session(*lm.chain, lm.model->tokenizer()) {
    m_template = lm.model->chatTemplate();
    if (!o.templateName.empty()) {
      const auto f = model::chatFormatFromName(o.templateName);
      if (!f) throw CliExit{2, "unknown chat template '" + o.templateName + "'"};
      m_template.format = *f;
    }
    m_template.thinking = !o.noThink;
    m_template.reasoningEffort = o.reasoningEffort;
    reset();
  }

  void reset() {
    m_messages.clear();
    if (!m_options.system.empty()) m_messages.push_back({"system", m_options.system});
    m_session.reset();
  }

  void reply(const std::string& user) {
    m_messages.push_back({"user", user});
    const int32_t ctx = m_session.contextLength();
    const model::ChatPrompt chat = model::buildChatPrompt(m_lm.model->tokenizer(), m_template,
                                                          m_messages, ctx, m_options.maxTokens);
    if (chat.droppedTurns) {
      std::fprintf(stderr, "[context full: dropped the %d oldest turn(s)]\n", chat.droppedTurns);
    }
    if (!chat.fits) {
      m_messages.pop_back();
      std::fprintf(stderr, "[message too long for the context of %d tokens]\n", ctx);
      return;
    }
    const std::vector<model::TokenId>& prompt = chat.tokens;
    runtime::GenerateOptions g;
    g.maxTokens = m_options.maxTokens;
    g.sampler = m_options.sampler;
    g.stop = model::chatStopStrings(m_template.format);
    g.lookup.maxDraft = m_options.draftMax;
    runtime::ReasoningSplit split;
    bool inReasoning = false;
    const bool terminal = isatty(STDOUT_FILENO);
    auto print = [&](const runtime::ReasoningSplit::Parts& p) {
      if (!p.reasoning.empty() && !m_options.hideReasoning) {
        if (!inReasoning) std::fputs(terminal ? "\x1b[2m" : "[thinking]\n", stdout);
        inReasoning = true;
        std::fwrite(p.reasoning.data(), 1, p.reasoning.size(), stdout);
      }
      if (!p.content.empty()) {
        if (inReasoning) std::fputs(terminal ? "\x1b[0m\n\n" : "\n[/thinking]\n", stdout);
        inReasoning = false;
        std::fwrite(p.content.data(), 1, p.content.size(), stdout);
      }
      std::fflush(stdout);
    };
    const auto r = m_session.generate(prompt, g, [&](std::string_view piece) {
      print(split.push(piece));
      return true;
    });
    print(split.finish());
    if (inReasoning) std::fputs(terminal ? "\x1b[0m" : "\n[/thinking]", stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (r.finish == runtime::FinishReason::ContextFull) {
      std::fprintf(stderr, "[reply stopped: context full]\n");
    }
    m_messages.push_back({"assistant", r.text});
  }

 private:
  const ChatOptions& m_options;
  LoadedModel& m_lm;
  runtime::Session m_session;
  model::ChatTemplate m_template;
  std::vector<model::ChatMessage> m_messages;
};

void runChat(const ChatOptions& o) {
  LoadedModel lm = loadModel(o.model);
  ChatLoop loop(o, lm);
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) {
    std::fprintf(stderr, "Chatting with %s. /reset starts over, /quit ends.\n",
                 lm.model->path().filename().string().c_str());
  }
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      loop.reset();
      std::fprintf(stderr, "[conversation reset]\n");
      continue;
    }
    if (line.empty()) continue;
    loop.reply(line);
  }
}

}  // namespace

void registerChatCommand(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->sampler.temperature = 0.7f;
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat (stdin lines, streaming replies)");
  addModelOptions(*cmd, o->model);
  cmd->add_option("--system", o->system, "system prompt");
  cmd->add_option("--template", o->templateName,
                  "chat format: chatml, qwen3, llama3, llama2, gemma, mistral, mistral-v7, phi3, "
                  "harmony");
  cmd->add_flag("--no-think", o->noThink,
                "ask a thinking model to answer without reasoning (qwen3 format), or to reason "
                "little (harmony: effort low)");
  cmd->add_option("--reasoning-effort", o->reasoningEffort,
                  "the reasoning effort a harmony model (gpt-oss) is asked for")
      ->check(CLI::IsMember({"low", "medium", "high"}));
  cmd->add_flag("--hide-reasoning", o->hideReasoning,
                "do not print a reply's reasoning (<think> block, harmony analysis channel; it "
                "is shown dimmed otherwise)");
  cmd->add_option("-n,--n-predict", o->maxTokens, "most tokens per reply")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  addSamplerOptions(*cmd, o->sampler, nullptr);
  addDraftOption(*cmd, o->draftMax);
  cmd->callback([o] { runChat(*o); });
}

}  // namespace shoal::cli
