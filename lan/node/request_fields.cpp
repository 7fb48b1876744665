#include "lan/node/request_fields.h"

#include <cmath>
#include <limits>

#include "engine/error.h"

namespace shoal::lan {

using nlohmann::json;

int32_t intField(const json& c, const char* field, int64_t lo, int64_t hi) {
  const auto it = c.find(field);
  if (it == c.end() || !it->is_number_integer()) {
    throw Error(c.value("op", "?") + ": field '" + field + "' missing or not an integer");
  }
  // An unsigned value above INT64_MAX would read as negative: clamp it, it is out of range.
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : it->get<int64_t>();
  if (v < lo || v > hi) {
    throw Error(c.value("op", "?") + ": field '" + field + "' = " + std::to_string(v) +
                " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int32_t>(v);
}

namespace {

// Whether `v` is an integer >= 0 (parsed JSON holds those as unsigned, JSON built in code may
// hold them as signed).
bool isNonNegativeInteger(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

}  // namespace

uint64_t unsignedField(const json& c, const char* field) {
  const auto it = c.find(field);
  if (it == c.end() || !isNonNegativeInteger(*it)) {
    throw Error(c.value("op", "?") + ": field '" + field +
                "' missing or not a non-negative integer");
  }
  return it->get<uint64_t>();
}

std::string stringField(const json& c, const char* field) {
  const auto it = c.find(field);
  if (it == c.end()) return "";
  if (!it->is_string()) throw Error(c.value("op", "?") + ": field '" + field + "' is not a string");
  return it->get<std::string>();
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
  const auto bad = [&where](const char* field, const char* what) {
    return Error("forward: '" + where + "." + field + "' must be " + what);
  };
  // json::value would convert any number (1e300 into an int is undefined behaviour) and throw
  // its own type_error for other types.
  const auto real = [&](const char* field, float fallback) {
    const auto it = fields.find(field);
    if (it == fields.end()) return fallback;
    const double v = it->is_number() ? it->get<double>() : std::nan("");
    if (!(std::fabs(v) <= double(std::numeric_limits<float>::max()))) {
      throw bad(field, "a finite number");
    }
    return float(v);
  };
  runtime::SamplerParams p;
  p.temperature = real("temperature", p.temperature);
  p.topP = real("top_p", p.topP);
  p.minP = real("min_p", p.minP);
  p.repeatPenalty = real("repeat_penalty", p.repeatPenalty);
  if (const auto it = fields.find("top_k"); it != fields.end()) {
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT32_MAX)) ||
        it->get<int64_t>() < std::numeric_limits<int32_t>::min() ||
        it->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      throw bad("top_k", "a 32-bit integer");
    }
    p.topK = int32_t(it->get<int64_t>());
  }
  if (const auto it = fields.find("seed"); it != fields.end()) {
    if (!isNonNegativeInteger(*it)) throw bad("seed", "a non-negative integer");
    p.seed = it->get<uint64_t>();
  }
  return p;
}

Message reply(const Message& request, const std::string& op) {
  Message m;
  m.control = {{"op", op}};
  if (request.control.contains("id")) m.control["id"] = request.control["id"];
  return m;
}

}  // namespace shoal::lan
