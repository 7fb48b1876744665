// The OpenAI wire format: what requests are accepted or refused (and how the refusal reads), and
// the shape of what the server sends back.

#include <QtTest>
#include <fstream>

#include "lan/api/openai_protocol.h"
#include "lan/api/tool_calls.h"

using namespace shoal::api;
using nlohmann::json;

namespace {

// The ApiError a chat body raises; fails the test when it parses.
ApiError chatError(const std::string& body) {
  try {
    parseChatRequest(body);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "", "no error");
}

const char* kHello = R"("messages":[{"role":"user","content":"hi"}])";

// Bodies with escapes in them, as plain literals outside the test class (moc reads raw strings
// as plain ones, and these would throw off its reading of the class).
const std::string kToolsRequest =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":"
    "\"auto\","
    "\"parallel_tool_calls\":true,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"string\","
    "\"description\":"
    "\"\\\"Zürich\\\"\\n\"},\"a\":{\"type\":\"number\"}}}}}]}";
// Its tool as json.dumps writes it: the client's key order, ", " and ": ", non-ASCII as is.
const std::string kToolsRequestTool =
    "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"z\": {\"type\": \"string\", \"description\": "
    "\"\\\"Zürich\\\"\\n\"}, "
    "\"a\": {\"type\": \"number\"}}}}}";
const std::string kCallsRequest =
    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"b\\\":1,\\\"a\\\":[true,null,2.5]}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}]}";
// A string of control characters as json.dumps writes it.
const std::string kControlCharactersText = "\"a\\u0001\\u001fb\\t\"";
const std::string kStringArgumentsCall = "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}";

}  // namespace

class TestOpenAiProtocol : public QObject {
  Q_OBJECT

 private slots:
  void malformedJsonIsA400InvalidJsonError() {
    const ApiError e = chatError(R"({"model": "m", "messages": [)");
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.code()), QString("invalid_json"));
  }

  void aNumberBeyondDoubleIsA400InvalidJsonError() {
    // nlohmann throws out_of_range, not parse_error, for it (found by fuzz_api).
    const ApiError e = chatError(std::string(R"({"model":"m","seed":4e4444,)") + kHello + "}");
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.code()), QString("invalid_json"));
  }

  void aBodyThatIsNotAnObjectIsRefused() { QCOMPARE(chatError("[1, 2]").status(), 400); }

  void missingModelIsRefusedNamingTheParameter() {
    const ApiError e = chatError(std::string("{") + kHello + "}");
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.param()), QString("model"));
  }

  void temperatureAboveTwoIsRefused() {
    const ApiError e = chatError(std::string(R"({"model":"m","temperature":2.5,)") + kHello + "}");
    QCOMPARE(QString::fromStdString(e.param()), QString("temperature"));
  }

  void topPOfZeroIsRefused() {
    const ApiError e = chatError(std::string(R"({"model":"m","top_p":0,)") + kHello + "}");
    QCOMPARE(QString::fromStdString(e.param()), QString("top_p"));
  }

  void nOtherThanOneIsRefused() {
    const ApiError e = chatError(std::string(R"({"model":"m","n":2,)") + kHello + "}");
    QCOMPARE(QString::fromStdString(e.param()), QString("n"));
  }

  void maxTokensMustBePositive() {
    const ApiError e = chatError(std::string(R"({"model":"m","max_tokens":0,)") + kHello + "}");
    QCOMPARE(QString::fromStdString(e.param()), QString("max_tokens"));
  }

  void stopTakesAStringOrUpToFourStrings() {
    const ChatRequest one =
        parseChatRequest(std::string(R"({"model":"m","stop":"END",)") + kHello + "}");
    QCOMPARE(one.sampling.stop.size(), size_t(1));
    const ChatRequest four =
        parseChatRequest(std::string(R"({"model":"m","stop":["a","b","c","d"],)") + kHello + "}");
    QCOMPARE(four.sampling.stop.size(), size_t(4));
    QCOMPARE(chatError(std::string(R"({"model":"m","stop":["a","b","c","d","e"],)") + kHello + "}")
                 .status(),
             400);
  }

  void parametersAreReadIntoTheRequest() {
    const ChatRequest r = parseChatRequest(
        std::string(R"({"model":"m","temperature":0.5,"top_p":0.9,"max_tokens":7,"seed":-1,)"
                    R"("stream":true,"stream_options":{"include_usage":true},)") +
        kHello + "}");
    QCOMPARE(*r.sampling.temperature, 0.5f);
    QCOMPARE(*r.sampling.topP, 0.9f);
    QCOMPARE(*r.sampling.maxTokens, 7);
    QCOMPARE(*r.sampling.seed, ~uint64_t(0));
    QVERIFY(r.sampling.stream);
    QVERIFY(r.sampling.includeUsageInStream);
  }

  void developerRoleIsTheSystemRole() {
    const ChatRequest r =
        parseChatRequest(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},)"
                         R"({"role":"user","content":"hi"}]})");
    QCOMPARE(QString::fromStdString(r.messages[0].role), QString("system"));
  }

  void textContentPartsAreJoined() {
    const ChatRequest r =
        parseChatRequest(R"({"model":"m","messages":[{"role":"user","content":)"
                         R"([{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
    QCOMPARE(QString::fromStdString(r.messages[0].content), QString("ab"));
  }

  void aContentPartOfAnotherTypeIsRefused() {
    for (const char* part : {R"({"type":"image_url","image_url":"x"})", R"({"type":{},"text":"a"})",
                             R"({"type":["text"],"text":"a"})"}) {
      const ApiError e = chatError(
          std::string(R"({"model":"m","messages":[{"role":"user","content":[)") + part + "]}]}");
      QCOMPARE(e.status(), 400);
      QCOMPARE(QString::fromStdString(e.param()), QString("messages[0].content"));
    }
  }

  void unknownRoleIsRefused() {
    const ApiError e = chatError(R"({"model":"m","messages":[{"role":"function","content":"x"}]})");
    QCOMPARE(QString::fromStdString(e.param()), QString("messages[0].role"));
  }

  void toolsAreReadInTheClientsKeyOrderAsTojsonWritesThem() {
    const ChatRequest r = parseChatRequest(kToolsRequest);
    QCOMPARE(r.tools.size(), size_t(1));
    QCOMPARE(QString::fromStdString(r.tools[0]), QString::fromStdString(kToolsRequestTool));
  }

  void toolChoiceNoneOffersNoToolsAndForcingACallIsRefused() {
    const std::string tools = R"("tools":[{"type":"function","function":{"name":"f"}}])";
    QVERIFY(parseChatRequest(std::string(R"({"model":"m",)") + kHello + "," + tools +
                             R"(,"tool_choice":"none"})")
                .tools.empty());
    for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"f"}})"}) {
      const ApiError e = chatError(std::string(R"({"model":"m",)") + kHello + "," + tools +
                                   R"(,"tool_choice":)" + choice + "}");
      QCOMPARE(e.status(), 400);
      QCOMPARE(QString::fromStdString(e.param()), QString("tool_choice"));
    }
  }

  void malformedToolsAreRefusedNamingTheParameter() {
    const std::pair<const char*, const char*> cases[] = {
        {R"("tools":{"type":"function"})", "tools"},
        {R"("tools":[{"type":"retrieval"}])", "tools[0].type"},
        // A "type" of another JSON type: refused, not a JSON library exception (the fuzzer's).
        {R"("tools":[{"type":{"name":"f"}}])", "tools[0].type"},
        {R"("tools":[{"type":7,"function":{"name":"f"}}])", "tools[0].type"},
        {R"("tools":[{"type":"function","function":{"description":"no name"}}])",
         "tools[0].function.name"},
        {R"("tools":[{"type":"function","function":{"name":""}}])", "tools[0].function.name"},
        {R"("tools":[],"parallel_tool_calls":"yes")", "parallel_tool_calls"},
    };
    for (const auto& [fields, param] : cases) {
      const ApiError e = chatError(std::string(R"({"model":"m",)") + kHello + "," + fields + "}");
      QCOMPARE(e.status(), 400);
      QCOMPARE(QString::fromStdString(e.param()), QString(param));
    }
  }

  void aRepeatedKeyInToolsKeepsItsLastValueAsElsewhere() {
    const ChatRequest r =
        parseChatRequest(std::string(R"({"model":"m",)") + kHello +
                         R"(,"tools":[{"type":"function","function":{"name":"f","name":"g"}}]})");
    QCOMPARE(QString::fromStdString(r.tools.at(0)),
             QString(R"({"type": "function", "function": {"name": "g"}})"));
  }

  void aRequestWithToolsMayNotHoldAHugeObject() {
    std::string big = "{";
    for (int i = 0; i < 1100; ++i) big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    big += "}";
    const ApiError e = chatError(
        std::string(R"({"model":"m",)") + kHello +
        R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)" + big + "}}]}");
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.param()), QString("tools"));
  }

  void assistantToolCallsAndToolResultsAreRead() {
    const ChatRequest r = parseChatRequest(kCallsRequest);
    QCOMPARE(r.messages.size(), size_t(3));
    QCOMPARE(QString::fromStdString(r.messages[1].content), QString());
    QCOMPARE(r.messages[1].toolCalls.size(), size_t(1));
    QCOMPARE(QString::fromStdString(r.messages[1].toolCalls[0].name), QString("f"));
    QCOMPARE(QString::fromStdString(r.messages[1].toolCalls[0].arguments),
             QString(R"({"b": 1, "a": [true, null, 2.5]})"));
    QCOMPARE(QString::fromStdString(r.messages[2].role), QString("tool"));
    QCOMPARE(QString::fromStdString(r.messages[2].content), QString("ok"));
  }

  void toolCallArgumentsMustBeAJsonObject() {
    for (const char* arguments : {"\"{not json\"", "\"[1]\"", "{\"a\":1}"}) {
      const ApiError e =
          chatError(std::string(R"({"model":"m","messages":[{"role":"user","content":"hi"},)") +
                    R"({"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" +
                    arguments + R"(}}]},{"role":"user","content":"x"}]})");
      QCOMPARE(e.status(), 400);
      QCOMPARE(QString::fromStdString(e.param()),
               QString("messages[1].tool_calls[0].function.arguments"));
    }
    // Without calls, an assistant message still needs content.
    const ApiError e = chatError(
        R"({"model":"m","messages":[{"role":"assistant"},{"role":"user","content":"x"}]})");
    QCOMPARE(QString::fromStdString(e.param()), QString("messages[0].content"));
  }

  // pythonJsonText writes what the templates' tojson (json.dumps) wrote for the fixtures.
  void pythonJsonTextMatchesJsonDumpsOnTheChatFixtures() {
    std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/chat_templates.json");
    const auto doc = nlohmann::ordered_json::parse(in);
    int checked = 0;
    for (const auto& c : doc["cases"]) {
      if (!c.contains("tools")) continue;
      for (size_t i = 0; i < c["tools"].size(); ++i) {
        QCOMPARE(QString::fromStdString(pythonJsonText(c["tools"][i])),
                 QString::fromStdString(c["tools_text"][i].get<std::string>()));
        ++checked;
      }
      for (const auto& m : c["messages"]) {
        for (const auto& call : m.value("tool_calls", nlohmann::ordered_json::array())) {
          QCOMPARE(QString::fromStdString(pythonJsonText(call["function"]["arguments"])),
                   QString::fromStdString(call["function"]["arguments_text"].get<std::string>()));
          ++checked;
        }
      }
    }
    QVERIFY(checked >= 10);
    // Control characters other than the named escapes, as Python writes them.
    QCOMPARE(QString::fromStdString(pythonJsonText(nlohmann::ordered_json("a\x01\x1f"
                                                                          "b\t"))),
             QString::fromStdString(kControlCharactersText));
  }

  void readToolCallTakesObjectOrStringArgumentsAndRefusesTheRest() {
    auto read = [](std::string_view body) { return readToolCall(body); };
    QCOMPARE(QString::fromStdString(read(R"({"name": "f", "arguments": {"x": 1}})")->arguments),
             QString(R"({"x":1})"));
    QCOMPARE(QString::fromStdString(read(kStringArgumentsCall)->arguments), QString(R"({"x":1})"));
    QCOMPARE(QString::fromStdString(read(R"({"name": "f"})")->arguments), QString("{}"));
    // Llama 3.1 names them "parameters".
    QCOMPARE(QString::fromStdString(read(R"({"name": "f", "parameters": {"y": [2]}})")->arguments),
             QString(R"({"y":[2]})"));
    for (const char* bad :
         {"", "{", "[]", R"({"arguments": {}})", R"({"name": 3})",
          R"({"name": "f", "arguments": 5})", R"({"name": "f", "arguments": "[1]"})"}) {
      QVERIFY2(!read(bad), bad);
    }
    std::string deep(100, '[');
    QVERIFY(!read(R"({"name": "f", "arguments": {"a": )" + deep + "}}"));
  }

  void completionPromptMayBeAOneStringArray() {
    const CompletionRequest r = parseCompletionRequest(R"({"model":"m","prompt":["go"]})");
    QCOMPARE(QString::fromStdString(r.prompt), QString("go"));
  }

  void finishReasonsMapToOpenAiNames() {
    QCOMPARE(QString::fromStdString(finishReasonFor("length")), QString("length"));
    QCOMPARE(QString::fromStdString(finishReasonFor("context_full")), QString("length"));
    QCOMPARE(QString::fromStdString(finishReasonFor("eog")), QString("stop"));
    QCOMPARE(QString::fromStdString(finishReasonFor("stop")), QString("stop"));
  }

  void errorJsonHasOpenAiShape() {
    const json j =
        ApiError(404, "invalid_request_error", "model_not_found", "no", "model").toJson();
    QCOMPARE(QString::fromStdString(j["error"]["message"].get<std::string>()), QString("no"));
    QCOMPARE(QString::fromStdString(j["error"]["type"].get<std::string>()),
             QString("invalid_request_error"));
    QCOMPARE(QString::fromStdString(j["error"]["code"].get<std::string>()),
             QString("model_not_found"));
    QCOMPARE(QString::fromStdString(j["error"]["param"].get<std::string>()), QString("model"));
  }

  void streamChunkHasNullFinishReasonUntilTheLast() {
    const json mid = chatChunkJson("id", 1, "m", std::nullopt, std::string("x"), "");
    QVERIFY(mid["choices"][0]["finish_reason"].is_null());
    QCOMPARE(QString::fromStdString(mid["choices"][0]["delta"]["content"].get<std::string>()),
             QString("x"));
    const json last = chatChunkJson("id", 1, "m", std::nullopt, std::nullopt, "stop");
    QCOMPARE(QString::fromStdString(last["choices"][0]["finish_reason"].get<std::string>()),
             QString("stop"));
    QVERIFY(last["choices"][0]["delta"].empty());
  }

  // reasoning_format: auto (default) and deepseek split a <think> block off as
  // reasoning_content, none keeps it in the content, anything else is a 400 naming the field.
  void reasoningFormatIsParsedAndItsFieldsWritten() {
    const std::string hello = kHello;
    QVERIFY(parseChatRequest(R"({"model":"m",)" + hello + "}").splitReasoning);
    QVERIFY(parseChatRequest(R"({"model":"m","reasoning_format":"deepseek",)" + hello + "}")
                .splitReasoning);
    QVERIFY(!parseChatRequest(R"({"model":"m","reasoning_format":"none",)" + hello + "}")
                 .splitReasoning);
    const ApiError e = chatError(R"({"model":"m","reasoning_format":"think-tags",)" + hello + "}");
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.toJson()["error"]["param"].get<std::string>()),
             QString("reasoning_format"));

    QVERIFY(parseChatRequest(R"({"model":"m",)" + hello + "}").thinking);
    QVERIFY(!parseChatRequest(R"({"model":"m","chat_template_kwargs":{"enable_thinking":false},)" +
                              hello + "}")
                 .thinking);
    QCOMPARE(
        chatError(R"({"model":"m","chat_template_kwargs":{"enable_thinking":"no"},)" + hello + "}")
            .status(),
        400);

    // reasoning_effort (gpt-oss): top level over chat_template_kwargs; anything else is a 400.
    QCOMPARE(parseChatRequest(R"({"model":"m",)" + hello + "}").reasoningEffort, std::string());
    QCOMPARE(parseChatRequest(R"({"model":"m","reasoning_effort":"high",)" + hello + "}")
                 .reasoningEffort,
             std::string("high"));
    QCOMPARE(parseChatRequest(R"({"model":"m","reasoning_effort":"low","chat_template_kwargs":)"
                              R"({"reasoning_effort":"high"},)" +
                              hello + "}")
                 .reasoningEffort,
             std::string("low"));
    const ApiError effort = chatError(R"({"model":"m","reasoning_effort":"max",)" + hello + "}");
    QCOMPARE(QString::fromStdString(effort.toJson()["error"]["param"].get<std::string>()),
             QString("reasoning_effort"));

    const json whole = chatCompletionJson("id", 1, "m", "4", "stop", Usage{3, 9}, "Simple sum.");
    QCOMPARE(whole["choices"][0]["message"]["reasoning_content"].get<std::string>(),
             std::string("Simple sum."));
    QCOMPARE(whole["choices"][0]["message"]["content"].get<std::string>(), std::string("4"));
    QVERIFY(!chatCompletionJson("id", 1, "m", "4", "stop", Usage{3, 1})["choices"][0]["message"]
                 .contains("reasoning_content"));
    const json delta = chatChunkJson("id", 1, "m", std::nullopt, std::nullopt, "", nullptr,
                                     std::string("hmm"))["choices"][0]["delta"];
    QCOMPARE(delta["reasoning_content"].get<std::string>(), std::string("hmm"));
    QVERIFY(!delta.contains("content"));
  }

  void usageCountsAddUp() {
    const Usage u{10, 5};
    QCOMPARE(u.toJson()["total_tokens"].get<int>(), 15);
  }

  void nestingDeeperThanTheBoundIsRefusedBeforeParsing() {
    const size_t depth = 1000000;
    const std::string body = std::string(R"({"model":"m","max_tokens":)") +
                             std::string(depth, '[') + std::string(depth, ']') + "," + kHello + "}";
    const ApiError e = chatError(body);
    QCOMPARE(e.status(), 400);
    QCOMPARE(QString::fromStdString(e.code()), QString("invalid_json"));
    QVERIFY(e.what() != nullptr && std::string(e.what()).find("deeper than") != std::string::npos);
  }

  void nestingAtTheBoundIsAccepted() {
    const std::string deep =
        std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']');
    const ChatRequest r =
        parseChatRequest(std::string(R"({"model":"m","metadata":)") + deep + "," + kHello + "}");
    QCOMPARE(r.messages.size(), size_t{1});
  }

  void bracketsInsideStringsDoNotCountAsNesting() {
    const std::string content = std::string(10000, '[') + "\\\\\\\"" + std::string(10000, '{');
    const ChatRequest r = parseChatRequest(
        R"({"model":"m","messages":[{"role":"user","content":")" + content + R"("}]})");
    QCOMPARE(r.messages[0].content.size(), size_t{20002});
  }

  void moreValuesThanTheBoundAreRefused() {
    std::string many = "[0";
    for (size_t i = 0; i < kMaxJsonValues; ++i) many += ",0";
    many += "]";
    const ApiError e =
        chatError(std::string(R"({"model":"m","tools":)") + many + "," + kHello + "}");
    QCOMPARE(e.status(), 400);
    QVERIFY(std::string(e.what()).find("JSON values") != std::string::npos);
  }

  void errorMessagesQuoteAtMostABoundedPieceOfTheValue() {
    const std::string huge(1 << 20, 'x');
    const json hello = json::array({{{"role", "user"}, {"content", "hi"}}});
    const ApiError badMax =
        chatError(json{{"model", "m"}, {"max_tokens", huge}, {"messages", hello}}.dump());
    QCOMPARE(QString::fromStdString(badMax.param()), QString("max_tokens"));
    QVERIFY(std::string(badMax.what()).size() < 4 * kMaxEchoBytes);
    const json badRoleMessages = json::array({{{"role", huge}, {"content", "x"}}});
    const ApiError badRole = chatError(json{{"model", "m"}, {"messages", badRoleMessages}}.dump());
    QVERIFY(std::string(badRole.what()).size() < 4 * kMaxEchoBytes);
    const std::string unterminated = json{{"model", huge}}.dump();
    const ApiError cut = chatError(unterminated.substr(0, unterminated.size() - 2));
    QCOMPARE(QString::fromStdString(cut.code()), QString("invalid_json"));
    QVERIFY(std::string(cut.what()).size() < 8 * kMaxEchoBytes);
  }
  void aParserErrorQuotesAtMostKMaxEchoBytesOfTheInput() {
    // The parser's own message quotes the token it stopped at ("last read: '...'").
    const std::string unterminated = json{{"model", std::string(1 << 20, 'x')}}.dump();
    const std::string cut = chatError(unterminated.substr(0, unterminated.size() - 2)).what();
    QVERIFY2(cut.find(std::string(kMaxEchoBytes + 1, 'x')) == std::string::npos, cut.c_str());
    // ... or the number too large for a double ("number overflow parsing '...'").
    const std::string overflow =
        chatError(R"({"model":"m","seed":)" + std::string(4096, '9') + "}").what();
    QVERIFY2(overflow.find(std::string(kMaxEchoBytes + 1, '9')) == std::string::npos,
             overflow.c_str());
  }
  void aContainerInAnErrorIsDescribedNotDumped() {
    const ApiError e = chatError(std::string(R"({"model":"m","n":[[1,2],[3]],)") + kHello + "}");
    QCOMPARE(QString::fromStdString(e.param()), QString("n"));
    QVERIFY(std::string(e.what()).find("an array of 2 values") != std::string::npos);
  }

  void sseEventIsOneDataLineAndABlankLine() {
    const std::string e = sseEvent(json{{"a", "line\nbreak"}});
    QVERIFY(e.rfind("data: ", 0) == 0);
    QCOMPARE(e.find('\n'), e.size() - 2);  // the payload's newline is escaped
  }
};

QTEST_GUILESS_MAIN(TestOpenAiProtocol)
#include "test_openai_protocol.moc"
