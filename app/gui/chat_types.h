#pragma once
// Plain values that cross the thread boundary between the GUI and the reply engines (queued
// signals copy them) and that the ChatStore persists.

#include <QList>
#include <QMetaType>
#include <QString>

namespace shoal::gui {

// The context the app loads a model with: the model's training context, capped so that a small
// machine does not reserve a KV cache for 128k tokens (the same cap shoal-cli uses by default).
inline constexpr int kMaxChatContext = 4096;
// Requests the app's API server generates at once (each a KV cache of up to kMaxChatContext).
inline constexpr int kApiParallel = 4;

// Sampling and length settings of one conversation (stored with it, sent with every request).
struct GenerationSettings {
  double temperature = 0.7;  // <= 0: greedy
  double topP = 0.95;        // >= 1: off
  int topK = 40;             // <= 0: off
  int maxTokens = 512;       // most new tokens per reply
  qint64 seed = -1;          // < 0: a fresh random seed per reply
  // Reasoning models: false asks the model to answer without reasoning (Qwen3's
  // enable_thinking=false; gpt-oss, which always reasons, reasons "low"). Others ignore it.
  bool thinking = true;
  // gpt-oss's reasoning effort: "low", "medium" or "high"; empty: the template's default.
  QString reasoningEffort;
};

// One turn of a conversation as the engine sees it ("system", "user" or "assistant").
struct ChatTurn {
  QString role;
  QString content;
};

// What the engine reports about one finished (or stopped) reply.
struct ReplyStats {
  int promptTokens = 0;        // tokens of the rendered prompt
  int generatedTokens = 0;     // tokens of the reply
  int contextUsed = 0;         // prompt plus reply: the context the conversation now takes
  int contextLength = 0;       // the chain's context
  int droppedTurns = 0;        // oldest turns left out so the prompt fits (context policy)
  double tokensPerSecond = 0;  // decode speed (0 when fewer than two tokens were generated)
  double prefillSeconds = 0;
  int draftedTokens = 0;       // speculative decoding: tokens drafted (prompt lookup, draft model)
  int acceptedTokens = 0;      // of those, the ones the model confirmed (not kept in the store)
  int modelDraftedTokens = 0;  // of the drafted ones, those of a draft model (not kept either)
  QString finishReason;  // runtime::finishReasonName: "length", "eog", "stop", "cancelled", ...
};

}  // namespace shoal::gui

Q_DECLARE_METATYPE(shoal::gui::GenerationSettings)
Q_DECLARE_METATYPE(shoal::gui::ChatTurn)
Q_DECLARE_METATYPE(shoal::gui::ReplyStats)
