#include "lan/node/request_fields.h"

#include "engine/error.h"

namespace shoal::lan {

using nlohmann::json;

int32_t intField(const json& c, const char* field, int64_t lo, int64_t hi) {
  const auto it = c.find(field);
  if (it == c.end() || !it->is_number_integer()) {
    throw Error(c.value("op", "?") + ": field '" + field + "' missing or not an integer");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    throw Error(c.value("op", "?") + ": field '" + field + "' = " + std::to_string(v) +
                " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int32_t>(v);
}

bool boolField(const json& c, const char* field) {
  const auto it = c.find(field);
  return it != c.end() && it->is_boolean() && it->get<bool>();
}

std::string stageKey(const json& stageId) {
  if (!stageId.is_string() && !stageId.is_number_integer()) {
    throw Error("field 'stage_id' missing or not a string/integer");
  }
  return stageId.dump();
}

bool isHexSha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char ch : s) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

runtime::SamplerParams samplerFields(const json& fields, const std::string& where) {
  if (!fields.is_object()) throw Error("forward: '" + where + "' must be null or an object");
  runtime::SamplerParams p;
  p.temperature = fields.value("temperature", p.temperature);
  p.topP = fields.value("top_p", p.topP);
  p.topK = fields.value("top_k", p.topK);
  p.minP = fields.value("min_p", p.minP);
  p.repeatPenalty = fields.value("repeat_penalty", p.repeatPenalty);
  p.seed = fields.value("seed", p.seed);
  return p;
}

Message reply(const Message& request, const std::string& op) {
  Message m;
  m.control = {{"op", op}};
  if (request.control.contains("id")) m.control["id"] = request.control["id"];
  return m;
}

}  // namespace shoal::lan
