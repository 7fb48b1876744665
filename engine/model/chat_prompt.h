#pragma once
// Turns a conversation into prompt tokens that fit the context, with one policy shared by every
// chat front-end (shoal-cli chat, the desktop app, the API): keep room for the reply (its token
// budget, or a quarter of the context if that is less) and, while the prompt is too long, drop the
// oldest user turn together with what followed it up to the next user message (its reply, tool
// calls and results). The system message and the newest message are never dropped.

#include <cstdint>
#include <vector>

#include "engine/model/chat_template.h"
#include "engine/model/tokenizer.h"

namespace shoal::model {

struct ChatPrompt {
  std::vector<TokenId> tokens;  // rendered with the assistant prefix, special tokens parsed
  int droppedTurns = 0;         // user turns dropped (each with its reply)
  bool fits = false;            // false: even the newest message alone leaves no room
};

// `messages` is updated to what was kept.
ChatPrompt buildChatPrompt(const Tokenizer& tokenizer, const ChatTemplate& chatTemplate,
                           std::vector<ChatMessage>& messages, int32_t contextLength,
                           int32_t replyBudget);

}  // namespace shoal::model
