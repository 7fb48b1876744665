#include "engine/model/harmony_tools.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/chat_template.h"
#include "engine/model/python_json.h"

namespace shoal::model {
namespace {

using Json = nlohmann::ordered_json;

// Jinja's truthiness of a schema field: present, and not null, false, 0, "" or empty.
bool truthy(const Json& spec, const char* key) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0;
  if (it->is_string() || it->is_structured()) return !it->empty();
  return true;
}

// Jinja's `x == "s"`: a string field equal to s.
bool is(const Json& spec, const char* key, std::string_view s) {
  const auto it = spec.find(key);
  return it != spec.end() && it->is_string() && it->get_ref<const std::string&>() == s;
}

// A value as Jinja's `~`/`+` of strings writes it: a string as it is, anything else as tojson.
std::string text(const Json& v) { return v.is_string() ? v.get<std::string>() : pythonJsonText(v); }

bool required(const Json& spec, const std::string& name) {
  const auto it = spec.find("required");
  if (it == spec.end() || !it->is_array()) return false;
  return std::any_of(it->begin(), it->end(),
                     [&](const Json& r) { return r.is_string() && r == name; });
}

std::string nullableSuffix(const Json& spec) { return truthy(spec, "nullable") ? " | null" : ""; }

// render_typescript_type.
std::string typescriptType(const Json& spec) {
  if (!spec.is_object()) return "any";
  const auto type = spec.find("type");
  if (is(spec, "type", "array")) {
    if (!truthy(spec, "items")) return "any[]" + nullableSuffix(spec);
    const Json& items = spec["items"];
    std::string out;
    if (is(items, "type", "string")) {
      out = "string[]";
    } else if (is(items, "type", "number") || is(items, "type", "integer")) {
      out = "number[]";
    } else if (is(items, "type", "boolean")) {
      out = "boolean[]";
    } else {
      const std::string inner = typescriptType(items);
      out = inner == "object | object" || inner.size() > 50 ? "any[]" : inner + "[]";
    }
    return out + nullableSuffix(spec);
  }
  if (type != spec.end() && type->is_array() && !type->empty()) {  // ["string", "null"]
    std::string out;
    for (size_t i = 0; i < type->size(); ++i) out += (i ? " | " : "") + text((*type)[i]);
    return out;
  }
  if (truthy(spec, "oneOf")) {
    // The template's "any" for unions of objects never applies: its flag is set inside a loop,
    // where Jinja scopes it. Each variant, its description and default as comments.
    std::string out;
    const Json& variants = spec["oneOf"];
    for (size_t i = 0; i < variants.size(); ++i) {
      const Json& v = variants[i];
      out += typescriptType(v);
      if (v.is_object() && truthy(v, "description")) out += "// " + text(v["description"]);
      // "{{ ... }}" after a line break that trim_blocks removed: the line's indent stays.
      if (v.is_object() && v.contains("default")) {
        out += std::string(20, ' ') + "// default: " + pythonJsonText(v["default"]);
      }
      if (i + 1 < variants.size()) out += " | \n";
    }
    return out;
  }
  if (is(spec, "type", "string")) {
    if (truthy(spec, "enum")) {
      std::string out = "\"";
      const Json& values = spec["enum"];
      for (size_t i = 0; i < values.size(); ++i) out += (i ? "\" | \"" : "") + text(values[i]);
      return out + "\"";
    }
    return "string" + nullableSuffix(spec);
  }
  if (is(spec, "type", "number") || is(spec, "type", "integer")) return "number";
  if (is(spec, "type", "boolean")) return "boolean";
  if (is(spec, "type", "object")) {
    if (!truthy(spec, "properties")) return "object";
    std::string out = "{\n";
    const Json& properties = spec["properties"];
    size_t i = 0;
    for (const auto& [name, property] : properties.items()) {
      // The template's "{{ render_typescript_type(...) }}" keeps the line break and indent
      // before it.
      out += name + (required(spec, name) ? "" : "?") + ": \n                " +
             typescriptType(property);
      if (++i < properties.size()) out += ", ";
    }
    return out + "}";
  }
  return "any";
}

// One tool of render_tool_namespace.
std::string toolDeclaration(const Json& tool) {
  if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
    throw Error("chat format harmony: a tool is not {\"type\": \"function\", \"function\": {...}}");
  }
  const Json& f = tool["function"];
  std::string out = "// " + (f.contains("description") ? text(f["description"]) : "") + "\n";
  out += "type " + (f.contains("name") ? text(f["name"]) : "") + " = ";
  const Json parameters = f.contains("parameters") ? f["parameters"] : Json();
  if (!parameters.is_object() || !truthy(parameters, "properties")) return out + "() => any;\n\n";
  out += "(_: {\n";
  for (const auto& [name, spec] : parameters["properties"].items()) {
    if (spec.is_object() && truthy(spec, "description"))
      out += "// " + text(spec["description"]) + "\n";
    out += name + (required(parameters, name) ? "" : "?") + ": " + typescriptType(spec);
    if (spec.is_object() && spec.contains("default")) {
      if (truthy(spec, "enum")) {
        out += ", // default: " + text(spec["default"]);
      } else if (truthy(spec, "oneOf")) {
        out += "// default: " + text(spec["default"]);
      } else {
        out += ", // default: " + pythonJsonText(spec["default"]);
      }
    }
    out += ",\n";
  }
  return out + "}) => any;\n\n";
}

}  // namespace

std::string harmonyToolNamespace(const std::vector<std::string>& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const std::string& tool : tools) {
    const Json parsed = Json::parse(tool, nullptr, false);
    if (parsed.is_discarded()) throw Error("chat format harmony: a tool is not valid JSON");
    out += toolDeclaration(parsed);
  }
  return out + "} // namespace functions";
}

}  // namespace shoal::model
