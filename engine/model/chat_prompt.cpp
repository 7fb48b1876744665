#include "engine/model/chat_prompt.h"

#include <algorithm>

namespace shoal::model {
namespace {

// Drop the oldest user turn and what followed it up to the next user message (the reply, and
// any tool calls and results in between); false when only one message is left. The newest
// message is never dropped.
bool dropOldestTurn(std::vector<ChatMessage>& messages) {
  const size_t first = (!messages.empty() && messages.front().role == "system") ? 1 : 0;
  if (messages.size() - first <= 1) return false;
  messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
  while (messages.size() - first > 1 && messages[first].role != "user") {
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
  }
  return true;
}

}  // namespace

ChatPrompt buildChatPrompt(const Tokenizer& tokenizer, const ChatTemplate& chatTemplate,
                           std::vector<ChatMessage>& messages, int32_t contextLength,
                           int32_t replyBudget) {
  const int32_t reserve = std::min(std::max(replyBudget, 1), contextLength / 4);
  auto render = [&] {
    return tokenizer.encode(renderChat(chatTemplate, messages, true), true, true);
  };
  ChatPrompt p;
  p.tokens = render();
  while (static_cast<int32_t>(p.tokens.size()) + reserve > contextLength &&
         dropOldestTurn(messages)) {
    ++p.droppedTurns;
    p.tokens = render();
  }
  p.fits = static_cast<int32_t>(p.tokens.size()) + 1 < contextLength;
  return p;
}

}  // namespace shoal::model
