#pragma once
// The tools block of gpt-oss's harmony format: the "functions" namespace its template writes in
// the developer message (render_tool_namespace and render_typescript_type in
// openai/gpt-oss-*'s chat_template.jinja), each tool's JSON schema as a TypeScript-like
// declaration. Reading the schemas needs a JSON parser: this file is built with nlohmann_json;
// an engine-only build without it (a GPU machine's) has harmony_tools_unavailable.cpp instead,
// which refuses.

#include <string>
#include <vector>

namespace shoal::model {

// "## functions\n\nnamespace functions {\n\n" ... "} // namespace functions" for the tools, each
// as ChatTemplate::tools holds it (an OpenAI `tools[]` entry as JSON text). Throws shoal::Error
// for a tool that is not valid JSON with a function object, or in a build without the parser.
std::string harmonyToolNamespace(const std::vector<std::string>& tools);

}  // namespace shoal::model
