#include "engine/model/python_json.h"

#include "engine/model/chat_template.h"

namespace shoal::model {
namespace {

using Ordered = nlohmann::ordered_json;

void appendPython(std::string& out, const Ordered& v) {
  switch (v.type()) {
    case Ordered::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += pythonJsonQuote(key);
        out += ": ";
        appendPython(out, item);
      }
      out += '}';
      return;
    }
    case Ordered::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        appendPython(out, v[i]);
      }
      out += ']';
      return;
    }
    case Ordered::value_t::string:
      out += pythonJsonQuote(v.get_ref<const std::string&>());
      return;
    default:  // numbers, booleans and null: json.dumps spells them as JSON does
      out += v.dump();
  }
}

}  // namespace

std::string pythonJsonText(const nlohmann::ordered_json& value) {
  std::string out;
  appendPython(out, value);
  return out;
}

}  // namespace shoal::model
