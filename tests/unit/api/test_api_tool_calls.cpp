// Tool calling through the HTTP API, end to end but for the model: ApiServers on loopback over
// a sink that "generates" a scripted reply (no model emits tool calls on cue, SmolLM2 included),
// driven with raw HTTP as a client would. One server per way of writing calls: the default model
// (ChatML, <tool_call> blocks), and tiny synthetic models with its vocabulary and Llama 3.1's
// and gpt-oss's templates (a JSON reply; a harmony message to functions.NAME). Checks that
// offered tools and a history of calls and results reach the prompt as the model's template
// writes them, that the calls in a reply come back as tool_calls (whole, and as stream deltas
// however the text is cut), with finish_reason "tool_calls", and that text which is not a call
// stays text.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "lan/api/api_server.h"
#include "lan/api/generation_queue.h"

using namespace shoal;
using namespace shoal::api;
using nlohmann::json;

namespace {

std::string modelPath() {
  const std::string p = std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(p)) return p;
  return model::defaultModelPath();
}

// A JobSink whose every job "generates" `reply`, pushed in pieces of `pieceSize` bytes from a
// thread of its own, as the real worker pushes tokens. Keeps the prompts it was given.
class ScriptedSink final : public JobSink {
 public:
  std::string reply;
  size_t pieceSize = 1000;

  ~ScriptedSink() override {
    for (std::thread& t : m_threads) t.join();
  }
  Submit submit(const std::shared_ptr<GenerationJob>& job) override {
    std::lock_guard lock(m_mutex);
    m_prompts.push_back(job->prompt());
    m_threads.emplace_back([job, text = reply, n = pieceSize] {
      for (size_t at = 0; at < text.size(); at += n) job->push(text.substr(at, n));
      runtime::GenerateResult r;
      r.text = text;
      r.tokens.assign(7, 0);
      r.promptTokens = static_cast<int32_t>(job->prompt().size());
      r.finish = runtime::FinishReason::EndOfGeneration;
      job->finish(std::move(r), {});
    });
    return Submit::Accepted;
  }
  QueueStats stats() const override { return {}; }
  size_t maxWaiting() const override { return 4; }
  size_t slotCount() const override { return 1; }
  int32_t contextLength() const override { return 2048; }

  std::vector<model::TokenId> lastPrompt() {
    std::lock_guard lock(m_mutex);
    return m_prompts.back();
  }

 private:
  std::mutex m_mutex;
  std::vector<std::vector<model::TokenId>> m_prompts;
  std::vector<std::thread> m_threads;
};

// POST `body` to `path` on 127.0.0.1:port; the response body (headers cut off).
std::string post(int port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t head = response.find("\r\n\r\n");
  return head == std::string::npos ? std::string() : response.substr(head + 4);
}

// A chunked body's data lines' JSON payloads (the SSE events), "[DONE]" left out.
std::vector<json> sseEvents(const std::string& chunked) {
  std::vector<json> out;
  for (size_t at = chunked.find("data: "); at != std::string::npos;
       at = chunked.find("data: ", at + 1)) {
    const size_t end = chunked.find("\n\n", at);
    const std::string payload = chunked.substr(at + 6, end - at - 6);
    if (payload != "[DONE]") out.push_back(json::parse(payload));
  }
  return out;
}

// In the client's key order (not sorted), which the prompt must keep.
const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
    "\"Weather in a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", "
    "\"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\"}}}]");

// Two calls after some text; the second writes its arguments as a string, as some models do.
const std::string kReplyWithCalls =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Rome\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": "
    "2}\"}\n</tool_call>\n";

const json kAsk = json::array({{{"role", "user"}, {"content", "Weather in Rome?"}}});

// A history of one call and its result (the arguments as a client sends them: a JSON string).
const json kHistoryWithCall = json::array(
    {{{"role", "user"}, {"content", "Weather in Paris?"}},
     {{"role", "assistant"},
      {"content", nullptr},
      {"tool_calls",
       json::array(
           {{{"id", "c1"},
             {"type", "function"},
             {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
     {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "18 C"}}});

// The Jinja source of a template the chat fixtures carry (models/templates of the pinned
// llama.cpp).
std::string fixtureTemplate(const std::string& file) {
  std::ifstream in(std::string(SHOAL_FIXTURES_DIR) + "/chat_templates.json");
  return json::parse(in)["templates"][file].get<std::string>();
}

// A server over its own scripted sink, for one model.
struct Served {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ScriptedSink> sink;
  std::unique_ptr<ApiServer> server;
  std::thread serving;

  explicit Served(const std::string& path)
      : model(model::Model::load(path)), sink(std::make_unique<ScriptedSink>()) {
    ApiServerOptions o;
    o.port = 0;
    server = std::make_unique<ApiServer>(*model, *sink, o);
    server->bind();
    serving = std::thread([this] { server->serve(); });
  }
  ~Served() {
    server->stop();
    serving.join();
  }
  json chat(const std::string& body) {
    return json::parse(post(server->port(), "/v1/chat/completions", body));
  }
  std::string lastPromptText() const { return model->tokenizer().decode(sink->lastPrompt(), true); }
};

// A two-layer model with the default model's vocabulary and `chatTemplate`.
std::string writeTinyModel(const QTemporaryDir& dir, const std::string& name,
                           const std::string& chatTemplate) {
  model::SyntheticModelSpec spec;
  spec.architecture = "llama";
  spec.nLayer = 2;
  spec.nEmbd = 64;
  spec.nHead = 2;
  spec.nHeadKv = 2;
  spec.nFf = 128;
  spec.vocabFrom = modelPath();
  spec.chatTemplate = chatTemplate;
  const std::string path = dir.filePath(QString::fromStdString(name)).toStdString();
  model::writeSyntheticModel(spec, path);
  return path;
}

}  // namespace

class TestApiToolCalls : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<ScriptedSink> m_sink;
  std::unique_ptr<ApiServer> m_server;
  std::thread m_serving;

  std::string chatBody(bool stream, bool tools, const json& messages = kAsk) const {
    nlohmann::ordered_json body = {
        {"model", "default"}, {"messages", messages}, {"stream", stream}};
    if (tools) body["tools"] = kTools;
    return body.dump();
  }
  std::string lastPromptText() const {
    return m_model->tokenizer().decode(m_sink->lastPrompt(), true);
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(modelPath())) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(modelPath());
    m_sink = std::make_unique<ScriptedSink>();
    ApiServerOptions o;
    o.port = 0;
    m_server = std::make_unique<ApiServer>(*m_model, *m_sink, o);
    m_server->bind();
    m_serving = std::thread([this] { m_server->serve(); });
  }

  void cleanupTestCase() {
    if (m_server) m_server->stop();
    if (m_serving.joinable()) m_serving.join();
    m_server.reset();
    m_sink.reset();
  }

  void llama31ToolsAndAJsonReplyCall() {
    QTemporaryDir dir;
    Served s(writeTinyModel(dir, "llama31.gguf",
                            fixtureTemplate("meta-llama-Llama-3.2-3B-Instruct.jinja")));
    QCOMPARE(s.model->chatTemplate().format, model::ChatFormat::Llama31);
    s.sink->reply =
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}";
    for (const bool stream : {false, true}) {
      const std::string body = chatBody(stream, true);
      const std::string raw = post(s.server->port(), "/v1/chat/completions", body);
      json calls = json::array();
      std::string finish;
      if (stream) {
        for (const json& e : sseEvents(raw)) {
          const json& choice = e["choices"][0];
          for (const json& c : choice["delta"].value("tool_calls", json::array()))
            calls.push_back(c);
          if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        }
      } else {
        const json r = json::parse(raw);
        calls = r["choices"][0]["message"]["tool_calls"];
        finish = r["choices"][0]["finish_reason"];
        QVERIFY(r["choices"][0]["message"]["content"].is_null());
      }
      QCOMPARE(calls.size(), size_t(1));
      QCOMPARE(QString::fromStdString(calls[0]["function"]["name"]), QString("get_weather"));
      QVERIFY(json::parse(calls[0]["function"]["arguments"].get<std::string>()) ==
              json::object({{"city", "Rome"}}));
      QCOMPARE(QString::fromStdString(finish), QString("tool_calls"));
    }
    const std::string prompt = s.lastPromptText();
    QVERIFY2(prompt.find("Environment: ipython\n") != std::string::npos, prompt.c_str());
    QVERIFY2(prompt.find("{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "
                         "\"get_weather\",") != std::string::npos,
             prompt.c_str());
    // Two calls in one message: this format cannot write them, which is the client's to fix.
    json twoCalls = kHistoryWithCall;
    twoCalls[1]["tool_calls"].push_back(twoCalls[1]["tool_calls"][0]);
    const json refused = s.chat(chatBody(false, true, twoCalls));
    QCOMPARE(QString::fromStdString(refused["error"]["param"]), QString("messages"));
    QVERIFY(refused["error"]["message"].get<std::string>().find("one") != std::string::npos);
    // A reply that is JSON but not a call is text.
    s.sink->reply = "{\"answer\": 42}";
    const json r = s.chat(chatBody(false, true));
    QCOMPARE(QString::fromStdString(r["choices"][0]["message"]["content"]),
             QString("{\"answer\": 42}"));
    QCOMPARE(QString::fromStdString(r["choices"][0]["finish_reason"]), QString("stop"));
  }

  void harmonyToolsAndAMessageToAFunction() {
    QTemporaryDir dir;
    Served s(writeTinyModel(dir, "harmony.gguf", fixtureTemplate("openai-gpt-oss-120b.jinja")));
    QCOMPARE(s.model->chatTemplate().format, model::ChatFormat::Harmony);
    // As gpt-oss replies after the prompt's <|start|>assistant; <|call|> is a stop string.
    s.sink->reply =
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
        "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}";
    for (const size_t piece : {size_t{1000}, size_t{2}}) {
      s.sink->pieceSize = piece;
      for (const bool stream : {false, true}) {
        const std::string raw =
            post(s.server->port(), "/v1/chat/completions", chatBody(stream, true));
        json calls = json::array();
        std::string finish, reasoning, content;
        if (stream) {
          for (const json& e : sseEvents(raw)) {
            const json& choice = e["choices"][0];
            const json& delta = choice["delta"];
            for (const json& c : delta.value("tool_calls", json::array())) calls.push_back(c);
            if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
            if (delta.contains("content")) content += delta["content"];
            if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
          }
        } else {
          const json r = json::parse(raw);
          const json& m = r["choices"][0]["message"];
          calls = m["tool_calls"];
          reasoning = m.value("reasoning_content", "");
          content = m["content"].is_null() ? "" : m["content"].get<std::string>();
          finish = r["choices"][0]["finish_reason"];
        }
        QCOMPARE(calls.size(), size_t(1));
        QCOMPARE(QString::fromStdString(calls[0]["function"]["name"]), QString("get_weather"));
        QCOMPARE(QString::fromStdString(reasoning), QString("Need the weather."));
        QCOMPARE(QString::fromStdString(content), QString());
        QCOMPARE(QString::fromStdString(finish), QString("tool_calls"));
      }
    }
    const std::string prompt = s.lastPromptText();
    QVERIFY2(prompt.find("namespace functions {\n\n// Weather in a city.\ntype get_weather = (_: "
                         "{\ncity: string,\n}) => any;") != std::string::npos,
             prompt.c_str());
    // Without tools offered, such a message is answer text, as before.
    s.sink->pieceSize = 1000;
    const json r = s.chat(chatBody(false, false));
    QCOMPARE(QString::fromStdString(r["choices"][0]["message"]["content"]),
             QString("{\"city\":\"Rome\"}"));
    QCOMPARE(QString::fromStdString(r["choices"][0]["finish_reason"]), QString("stop"));
  }

  void offeredToolsReachThePromptAsTheTemplateWritesThem() {
    m_sink->reply = "Hello.";
    const json r =
        json::parse(post(m_server->port(), "/v1/chat/completions", chatBody(false, true)));
    QCOMPARE(QString::fromStdString(r["choices"][0]["message"]["content"]), QString("Hello."));
    const std::string prompt = lastPromptText();
    QVERIFY2(
        prompt.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                    "\"description\": \"Weather in a city.\", \"parameters\": {\"type\": "
                    "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
                    "\"required\": [\"city\"]}}}\n{\"type\": \"function\", \"function\": "
                    "{\"name\": \"add\", \"parameters\": {\"type\": \"object\"}}}\n</tools>") !=
            std::string::npos,
        prompt.c_str());
  }

  void aHistoryOfCallsAndResultsReachesThePrompt() {
    m_sink->reply = "It is 18 C.";
    const json r = json::parse(
        post(m_server->port(), "/v1/chat/completions", chatBody(false, true, kHistoryWithCall)));
    QCOMPARE(QString::fromStdString(r["choices"][0]["finish_reason"]), QString("stop"));
    const std::string prompt = lastPromptText();
    QVERIFY2(prompt.find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                         "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                         "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n") != std::string::npos,
             prompt.c_str());
  }

  void callsInAWholeReplyComeBackAsToolCalls() {
    m_sink->reply = kReplyWithCalls;
    const json r =
        json::parse(post(m_server->port(), "/v1/chat/completions", chatBody(false, true)));
    const json& choice = r["choices"][0];
    QCOMPARE(QString::fromStdString(choice["finish_reason"]), QString("tool_calls"));
    QCOMPARE(QString::fromStdString(choice["message"]["content"]), QString("Let me check.\n"));
    const json& calls = choice["message"]["tool_calls"];
    QCOMPARE(calls.size(), size_t(2));
    QCOMPARE(QString::fromStdString(calls[0]["function"]["name"]), QString("get_weather"));
    QVERIFY(json::parse(calls[0]["function"]["arguments"].get<std::string>()) ==
            json::object({{"city", "Rome"}}));
    QCOMPARE(QString::fromStdString(calls[1]["function"]["name"]), QString("add"));
    QVERIFY(json::parse(calls[1]["function"]["arguments"].get<std::string>()) ==
            json::object({{"a", 2}}));
    QCOMPARE(QString::fromStdString(calls[0]["type"]), QString("function"));
    QVERIFY(calls[0]["id"].get<std::string>().starts_with("call_"));
    QVERIFY(calls[0]["id"] != calls[1]["id"]);
  }

  void callsInAStreamedReplyComeAsDeltasHoweverTheTextIsCut() {
    for (size_t piece : {size_t{1}, size_t{3}, size_t{1000}}) {
      m_sink->reply = kReplyWithCalls;
      m_sink->pieceSize = piece;
      const std::vector<json> events =
          sseEvents(post(m_server->port(), "/v1/chat/completions", chatBody(true, true)));
      std::string content;
      std::vector<json> calls;
      std::string finish;
      for (const json& e : events) {
        const json& choice = e["choices"][0];
        const json& delta = choice["delta"];
        if (delta.contains("content")) content += delta["content"].get<std::string>();
        for (const json& c : delta.value("tool_calls", json::array())) {
          QCOMPARE(c["index"].get<size_t>(), calls.size());
          calls.push_back(c);
        }
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      }
      QCOMPARE(QString::fromStdString(content), QString("Let me check.\n"));
      QCOMPARE(calls.size(), size_t(2));
      QCOMPARE(QString::fromStdString(calls[1]["function"]["name"]), QString("add"));
      QCOMPARE(QString::fromStdString(finish), QString("tool_calls"));
    }
    m_sink->pieceSize = 1000;
  }

  void withoutToolsOfferedACallIsJustText() {
    m_sink->reply = kReplyWithCalls;
    const json r =
        json::parse(post(m_server->port(), "/v1/chat/completions", chatBody(false, false)));
    QCOMPARE(QString::fromStdString(r["choices"][0]["message"]["content"]),
             QString::fromStdString(kReplyWithCalls));
    QVERIFY(!r["choices"][0]["message"].contains("tool_calls"));
    QCOMPARE(QString::fromStdString(r["choices"][0]["finish_reason"]), QString("stop"));
  }

  void aCallThatIsNotJsonStaysText() {
    m_sink->reply = "<tool_call>{get_weather: Rome}</tool_call>";
    const json r =
        json::parse(post(m_server->port(), "/v1/chat/completions", chatBody(false, true)));
    QCOMPARE(QString::fromStdString(r["choices"][0]["message"]["content"]),
             QString::fromStdString(m_sink->reply));
    QVERIFY(!r["choices"][0]["message"].contains("tool_calls"));
    QCOMPARE(QString::fromStdString(r["choices"][0]["finish_reason"]), QString("stop"));
  }
};

QTEST_GUILESS_MAIN(TestApiToolCalls)
#include "test_api_tool_calls.moc"
