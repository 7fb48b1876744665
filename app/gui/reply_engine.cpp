#include "app/gui/reply_engine.h"

#include <QRandomGenerator>
#include <algorithm>
#include <exception>
#include <string>

#include "engine/model/chat_prompt.h"
#include "engine/model/chat_template.h"
#include "engine/model/model.h"
#include "engine/runtime/session.h"

namespace shoal::gui {
namespace {

std::vector<model::ChatMessage> toMessages(const QList<ChatTurn>& turns) {
  std::vector<model::ChatMessage> out;
  out.reserve(static_cast<size_t>(turns.size()));
  for (const ChatTurn& t : turns) out.push_back({t.role.toStdString(), t.content.toStdString()});
  return out;
}

runtime::GenerateOptions generateOptions(const GenerationSettings& settings,
                                         const model::ChatTemplate& tmpl) {
  runtime::GenerateOptions g;
  g.maxTokens = std::max(settings.maxTokens, 1);
  g.sampler.temperature = static_cast<float>(settings.temperature);
  g.sampler.topP = static_cast<float>(settings.topP);
  g.sampler.topK = settings.topK;
  g.sampler.seed = settings.seed >= 0 ? static_cast<uint64_t>(settings.seed)
                                      : QRandomGenerator::global()->generate64();
  g.stop = model::chatStopStrings(tmpl.format);
  g.lookup.maxDraft = 8;  // prompt-lookup speculation: same replies (greedy) or distribution
  return g;
}

ReplyStats statsOf(const runtime::GenerateResult& r, int32_t contextLength, int droppedTurns) {
  ReplyStats s;
  s.promptTokens = r.promptTokens;
  s.generatedTokens = static_cast<int>(r.tokens.size());
  s.contextUsed = r.promptTokens + static_cast<int>(r.tokens.size());
  s.contextLength = contextLength;
  s.droppedTurns = droppedTurns;
  // The first token comes out of the prefill; decodeSeconds covers the ones after it.
  s.tokensPerSecond = (r.tokens.size() > 1 && r.decodeSeconds > 0)
                          ? static_cast<double>(r.tokens.size() - 1) / r.decodeSeconds
                          : 0.0;
  s.prefillSeconds = r.prefillSeconds;
  s.draftedTokens = r.draftedTokens;
  s.acceptedTokens = r.acceptedTokens;
  s.modelDraftedTokens = r.modelDraftedTokens;
  const std::string_view finish = runtime::finishReasonName(r.finish);
  s.finishReason = QString::fromUtf8(finish.data(), static_cast<qsizetype>(finish.size()));
  return s;
}

}  // namespace

ReplyEngine::ReplyEngine(QObject* parent) : QObject(parent) {
  qRegisterMetaType<GenerationSettings>();
  qRegisterMetaType<ChatTurn>();
  qRegisterMetaType<QList<ChatTurn>>();
  qRegisterMetaType<ReplyStats>();
}

void ReplyEngine::stop() { m_cancel.store(true); }

void ReplyEngine::requestReply(qint64 conversationId, const QList<ChatTurn>& turns,
                               const GenerationSettings& settings) {
  m_cancel.store(false);
  QMetaObject::invokeMethod(
      this, [this, conversationId, turns, settings] { generate(conversationId, turns, settings); },
      Qt::QueuedConnection);
}

void ReplyEngine::generate(qint64 conversationId, const QList<ChatTurn>& turns,
                           const GenerationSettings& settings) {
  try {
    const ReplyTarget target = replyTarget();
    if (!target.model) {
      emit generateFailed(conversationId, target.unavailable);
      return;
    }
    // The conversation's reasoning settings are render options of the model's template.
    model::ChatTemplate tmpl = target.model->chatTemplate();
    tmpl.thinking = settings.thinking;
    tmpl.reasoningEffort = settings.reasoningEffort.toStdString();
    std::vector<model::ChatMessage> messages = toMessages(turns);
    const model::ChatPrompt chat = model::buildChatPrompt(target.model->tokenizer(), tmpl, messages,
                                                          target.contextLength, settings.maxTokens);
    if (!chat.fits) {
      emit generateFailed(conversationId, tr("The message (%1 tokens) does not fit %2 of %3 "
                                             "tokens.")
                                              .arg(chat.tokens.size())
                                              .arg(target.contextName)
                                              .arg(target.contextLength));
      return;
    }
    runtime::GenerateOptions g = generateOptions(settings, tmpl);
    g.cancel = &m_cancel;
    const runtime::GenerateResult r =
        runReply(chat.tokens, g, [this, conversationId](std::string_view piece) {
          emit tokenStreamed(conversationId,
                             QString::fromUtf8(piece.data(), static_cast<qsizetype>(piece.size())));
          return !m_cancel.load();
        });
    emit replyFinished(conversationId, QString::fromStdString(r.text),
                       statsOf(r, target.contextLength, chat.droppedTurns));
  } catch (const std::exception& e) {
    emit generateFailed(conversationId, QString::fromStdString(e.what()));
  }
}

}  // namespace shoal::gui
