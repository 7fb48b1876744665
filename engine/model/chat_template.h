#pragma once
// Chat prompt formats. GGUF files carry a Jinja template (tokenizer.chat_template); Shoal does
// not run Jinja, it recognises which well-known format the template implements and renders that
// format natively. Users can override the choice by name.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::model {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { ChatML, Llama3, Llama2, Gemma };

std::string_view chatFormatName(ChatFormat format);  // "chatml", "llama3", "llama2", "gemma"
std::optional<ChatFormat> chatFormatFromName(std::string_view name);
// Recognise a Jinja template; ChatML when empty or unrecognised.
ChatFormat detectChatFormat(std::string_view jinjaTemplate);

// Render the conversation; with addAssistantPrefix the text ends where the assistant's reply
// begins. BOS is not included (the tokenizer adds it when the model wants one).
std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool addAssistantPrefix);

// Strings that end an assistant turn in this format (e.g. "<|im_end|>"), used as stop strings.
std::vector<std::string> chatStopStrings(ChatFormat format);

}  // namespace shoal::model
