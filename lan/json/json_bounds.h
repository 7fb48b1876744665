#pragma once
// Bounds on JSON text from the network, checked by one linear scan before it is parsed: nlohmann
// builds and destroys its tree recursively, so a reply or request nesting a million arrays deep
// overflows the stack (the API crashed that way before the check), and a flat list of millions of
// tiny values takes far more memory than its bytes. The OpenAI API (lan/api) and the Hub client
// (lan/hub) both scan what they receive with it.

#include <cstddef>
#include <string>
#include <string_view>

namespace shoal::lan {

struct JsonBounds {
  size_t maxDepth = 64;                // arrays/objects inside each other
  size_t maxValues = size_t{1} << 17;  // values in the whole text (an upper bound is counted)
};

// "" when `text` stays within `bounds`; otherwise what it exceeds, as the end of a sentence that
// names the text: "nests arrays/objects deeper than 64 levels (at byte 12)", "holds more than
// 131072 JSON values". Strings (and escapes in them) are skipped as the JSON grammar says;
// malformed JSON that stays within the bounds passes: the parser reports it.
std::string jsonBoundsViolation(std::string_view text, const JsonBounds& bounds);

}  // namespace shoal::lan
