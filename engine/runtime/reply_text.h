#pragma once
// Turns generated token ids into the streamed reply text — the one implementation, used by
// runtime::Session (engine/runtime/session.h): whole UTF-8 characters only, stop strings held
// back until they can no longer match, the text ending before the first stop string.

#include <string>
#include <string_view>
#include <vector>

#include "engine/model/tokenizer.h"

namespace shoal::runtime {

class ReplyText {
 public:
  ReplyText(const model::Tokenizer& tokenizer, std::vector<std::string> stops);

  // The text that became final with this token (may be empty). Sets stopped when a stop string
  // completed: nothing after it is ever returned.
  std::string push(model::TokenId token, bool& stopped);
  // End of the reply: what was held back (unless a stop string matched, then it is dropped).
  std::string finish(bool& stopped);

 private:
  std::string release(std::string piece, bool& stopped);

  const model::Tokenizer& m_tokenizer;
  std::vector<std::string> m_stops;
  model::Utf8StreamDecoder m_utf8;
  std::string m_held;  // tail that might start a stop string
};

}  // namespace shoal::runtime
