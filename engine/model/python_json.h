#pragma once
// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it: what the models' chat
// templates' `tojson` gives (", " and ": " separators, the key order of an ordered_json,
// non-ASCII characters as they are). Tool schemas and call arguments reach a prompt this way
// (lan/api/tool_calls.h, harmony_tools.h). Built only with nlohmann_json (engine/model's
// CMakeLists.txt).

#include <nlohmann/json.hpp>
#include <string>

namespace shoal::model {

// Floats come as nlohmann writes the shortest round-trip form, which is Python's except for
// magnitudes in [1e15, 1e16) (nlohmann switches to an exponent one digit earlier). Recursive:
// only for values of bounded depth (the API's checkJsonBounds).
std::string pythonJsonText(const nlohmann::ordered_json& value);

}  // namespace shoal::model
