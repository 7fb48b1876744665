#include "lan/api/api_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "engine/error.h"
#include "engine/model/chat_prompt.h"
#include "engine/model/kv_footprint.h"
#include "engine/runtime/reasoning_split.h"
#include "engine/runtime/tool_call_split.h"
#include "lan/api/bounded_http_server.h"
#include "lan/api/openai_protocol.h"
#include "lan/api/request_guard.h"
#include "lan/api/tool_calls.h"

namespace shoal::api {
namespace {

using nlohmann::json;

// How often a streaming reader that has nothing to send checks whether its client is still there
// (while its job waits in the queue, or between slow tokens).
constexpr std::chrono::milliseconds kStreamPoll{250};
// Requests per connection: one. A refused request's body is never read (that is the point of
// refusing in the pre-routing handler), so the connection must close after the answer; kept
// alive, the unread body would be parsed as the next request (a text/plain body smuggling a JSON
// POST past the checks). LLM requests take seconds; a TCP handshake on each costs nothing.
constexpr size_t kRequestsPerConnection = 1;

std::string dumpJson(const json& j) {
  // Model output is whole UTF-8 characters, but a model can still produce invalid sequences
  // (byte tokens); replace them rather than fail the response.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The head of `req` for the guard (method and path are views into `req`, which outlives it).
RequestHead requestHead(const httplib::Request& req) {
  RequestHead head{req.method, req.path, {}};
  head.headers.reserve(req.headers.size());
  for (const auto& [name, value] : req.headers) head.headers.emplace_back(name, value);
  return head;
}

void sendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dumpJson(e.toJson()), "application/json");
}

// The job's parameters from the request, with Shoal's defaults for what the client left out.
runtime::GenerateOptions generateOptions(const SamplingRequest& s, const ApiServerOptions& o,
                                         int32_t defaultMaxTokens) {
  runtime::GenerateOptions g;
  g.maxTokens = s.maxTokens.value_or(defaultMaxTokens);
  if (s.temperature) g.sampler.temperature = *s.temperature;
  if (s.topP) g.sampler.topP = *s.topP;
  g.sampler.topK = o.defaultTopK;
  g.sampler.minP = o.defaultMinP;
  g.sampler.seed = s.seed ? *s.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull;
  g.stop = s.stop;
  g.ignoreEndOfGeneration = s.ignoreEos;
  g.lookup.maxDraft = o.draftMax;
  return g;
}

std::string randomHex() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// One call the reply may have made: a tool_calls entry, numbered `next` (the `index` of a
// stream's deltas when `indexed`); where it is no call, `text` (what the model wrote) goes back
// into `content`.
void takeCall(const std::optional<ReplyToolCall>& call, const std::string& text,
              std::string& content, json& calls, int32_t& next, bool indexed) {
  if (!call) {
    content += text;
    return;
  }
  calls.push_back(toolCallJson(*call, "call_" + randomHex(),
                               indexed ? std::optional<int32_t>(next) : std::nullopt));
  ++next;
}

// ToolCallSplit's calls, each through takeCall.
void takeToolCalls(const std::vector<runtime::ToolCallSplit::Call>& found, std::string& content,
                   json& calls, int32_t& next, bool indexed) {
  for (const runtime::ToolCallSplit::Call& c : found) {
    takeCall(readToolCall(c.body), c.original, content, calls, next, indexed);
  }
}

// The reply's harmony messages to recipients (ReasoningSplit's), each through takeCall: calls
// where tools were offered, text otherwise (as commentary always was before tools).
void takeAddressedCalls(const std::vector<runtime::ReasoningSplit::Addressed>& found,
                        bool toolsOffered, std::string& content, json& calls, int32_t& next,
                        bool indexed) {
  for (const runtime::ReasoningSplit::Addressed& a : found) {
    takeCall(toolsOffered ? readAddressedCall(a.recipient, a.text) : std::nullopt, a.text, content,
             calls, next, indexed);
  }
}

// OpenAI's finish reason for a reply that made calls and then ended its turn.
std::string finishReasonWithCalls(const std::string& reason, int32_t calls) {
  return calls > 0 && reason == "stop" ? "tool_calls" : reason;
}

}  // namespace

ApiServer::ApiServer(const model::Model& model, JobSink& queue, ApiServerOptions options)
    : m_model(model),
      m_options(std::move(options)),
      m_modelId(m_options.modelId.empty() ? model.path().stem().string() : m_options.modelId),
      m_created(static_cast<int64_t>(std::time(nullptr))),
      m_loopbackBind(isLoopbackHost(m_options.host)),
      m_contextLength(queue.contextLength()),
      m_kvCacheBytes(model::kvCacheBytes(model.config(), 0, model.config().nLayer,
                                         queue.contextLength(),
                                         static_cast<int32_t>(queue.slotCount()))),
      m_queue(queue),
      m_http(std::make_unique<BoundedHttpServer>(kMaxHeadBytes, kMaxBodyBytes,
                                                 std::min(m_options.maxQueued, kMaxQueuedRequests) +
                                                     std::min(m_queue.slotCount(), kMaxParallel) +
                                                     kSpareHttpThreads,
                                                 kMaxPendingConnections)) {
  if (const std::string why = unsafeOptions(m_options); !why.empty()) {
    throw Error("API server: " + why);
  }
  // The guard refuses larger bodies before they are read; this is the library's own check.
  m_http->set_payload_max_length(kMaxBodyBytes);
  m_http->set_keep_alive_max_count(kRequestsPerConnection);
  installRoutes();
}

ApiServer::~ApiServer() { stop(); }

std::string unsafeOptions(const ApiServerOptions& o) {
  if (!isLoopbackHost(o.host) && o.apiKey.empty()) {
    return "refusing to serve " + o.host +
           " without an API key: anyone who can reach it could use the model; set "
           "SHOAL_API_KEY (or listen on 127.0.0.1)";
  }
  if (o.maxQueued < 1 || o.maxQueued > kMaxQueuedRequests) {
    return "a queue of " + std::to_string(o.maxQueued) + " requests is outside 1.." +
           std::to_string(kMaxQueuedRequests) + " (each waiting request holds an HTTP thread)";
  }
  return {};
}

void ApiServer::bind() {
  if (const std::string why = unsafeOptions(m_options); !why.empty()) {
    throw Error("API server: " + why);
  }
  if (m_options.port == 0) {
    m_port = m_http->bind_to_any_port(m_options.host);
    if (m_port <= 0) throw Error("API server: cannot bind " + m_options.host + " (any port)");
  } else {
    if (!m_http->bind_to_port(m_options.host, m_options.port)) {
      throw Error("API server: cannot bind " + m_options.host + ":" +
                  std::to_string(m_options.port) + " (address in use, or not this host's)");
    }
    m_port = m_options.port;
  }
}

void ApiServer::serve() { m_http->listen_after_bind(); }

void ApiServer::stop() {
  // Jobs first: a streaming reader then sees its job end (the worker finishes a cancelled job
  // at its next step) and frees its HTTP thread, which the HTTP server's stop waits for.
  {
    std::lock_guard lock(m_jobsMutex);
    m_stopping = true;
    for (const auto& weak : m_jobs) {
      if (const auto job = weak.lock()) job->cancel();
    }
    m_jobs.clear();
  }
  m_http->stopServing();
}

bool ApiServer::track(const std::shared_ptr<GenerationJob>& job) {
  std::lock_guard lock(m_jobsMutex);
  if (m_stopping) return false;
  std::erase_if(m_jobs, [](const auto& weak) { return weak.expired(); });
  m_jobs.push_back(job);
  return true;
}

void ApiServer::installRoutes() {
  httplib::Server& http = *m_http;

  // Runs after the head is read and before any body byte is: every request passes the guard.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const GuardPolicy policy{m_loopbackBind, m_port, m_options.apiKey, kMaxBodyBytes};
    if (const std::optional<ApiError> e = checkRequestHead(requestHead(req), policy)) {
      sendError(res, *e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Every >= 400 response without a body (unknown route, wrong method, too large) in OpenAI's
  // shape; the ones the handlers wrote already keep theirs.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404   ? "no route " + req.method + " " + req.path
                             : res.status == 413 ? "the request body is too large"
                                                 : "request failed";
    sendError(res, ApiError(res.status, "invalid_request_error",
                            res.status == 404 ? "not_found" : "", what));
  });

  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        sendError(res, ApiError(500, "server_error", "", what));
      });

  http.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    // Open to liveness probes; the model and the load are for those holding the key.
    if (!hasApiKey(requestHead(req), m_options.apiKey)) {
      res.set_content(dumpJson({{"status", "ok"}}), "application/json");
      return;
    }
    const QueueStats s = m_queue.stats();
    json body = {{"status", "ok"},
                 {"model", m_modelId},
                 {"queue",
                  {{"waiting", s.waiting},
                   {"running", s.running},
                   {"slots", s.slotCount},
                   {"kv_cache_bytes", m_kvCacheBytes},
                   {"max_waiting", m_queue.maxWaiting()},
                   {"completed", s.completed},
                   {"cancelled", s.cancelled},
                   {"rejected", s.rejected}}}};
    const std::vector<QueueStats> replicas = m_queue.replicaStats();
    if (replicas.size() > 1) {
      // Each replica of the model (a pipeline over the pool) with its own load.
      json list = json::array();
      for (const QueueStats& r : replicas) {
        list.push_back({{"waiting", r.waiting},
                        {"running", r.running},
                        {"slots", r.slotCount},
                        {"completed", r.completed},
                        {"generated_tokens", r.generatedTokens},
                        {"seconds_per_token",
                         r.generatedTokens > 0 ? r.jobSeconds / r.generatedTokens : 0.0}});
      }
      body["replicas"] = std::move(list);
    }
    res.set_content(dumpJson(body), "application/json");
  });

  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dumpJson(modelsJson(m_modelId, m_created)), "application/json");
  });

  auto generationRoute = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      try {
        handleGeneration(req, res, chat);
      } catch (const ApiError& e) {
        sendError(res, e);
      }
    };
  };
  http.Post("/v1/chat/completions", generationRoute(true));
  http.Post("/v1/completions", generationRoute(false));
}

void ApiServer::handleGeneration(const httplib::Request& req, httplib::Response& res, bool chat) {
  const model::Tokenizer& tokenizer = m_model.tokenizer();
  const int32_t ctx = m_contextLength;

  SamplingRequest sampling;
  std::vector<model::TokenId> prompt;
  int droppedTurns = 0;
  bool splitReasoning = false;
  bool toolsOffered = false;
  const model::ToolCallSyntax toolSyntax = model::toolCallSyntaxOf(m_model.chatTemplate().format);
  if (chat) {
    ChatRequest r = parseChatRequest(req.body);
    sampling = std::move(r.sampling);
    splitReasoning = r.splitReasoning;
    checkModel(sampling.model);
    model::ChatTemplate chatTemplate = m_model.chatTemplate();
    chatTemplate.thinking = r.thinking;
    chatTemplate.reasoningEffort = r.reasoningEffort;
    const bool usesTools =
        !r.tools.empty() || std::any_of(r.messages.begin(), r.messages.end(), [](const auto& m) {
          return !m.toolCalls.empty() || m.role == "tool";
        });
    if (usesTools && !model::chatFormatHasToolCalls(chatTemplate.format)) {
      throw ApiError(400, "invalid_request_error", "tools_unsupported",
                     "this model's chat format (" +
                         std::string(model::chatFormatName(chatTemplate.format)) +
                         ") has no tool calling in Shoal; tools work with the chatml, qwen3, "
                         "llama3.1 and harmony formats",
                     r.tools.empty() ? "messages" : "tools");
    }
    toolsOffered = !r.tools.empty();
    chatTemplate.tools = std::move(r.tools);
    model::ChatPrompt p;
    try {
      p = model::buildChatPrompt(tokenizer, chatTemplate, r.messages, ctx,
                                 sampling.maxTokens.value_or(ctx));
    } catch (const Error& e) {  // a conversation this format cannot write (two calls in one...)
      throw ApiError(400, "invalid_request_error", "unsupported_conversation", e.what(),
                     "messages");
    }
    if (!p.fits) {
      throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                     "the newest message alone (" + std::to_string(p.tokens.size()) +
                         " tokens) does not fit this model's context of " + std::to_string(ctx) +
                         " tokens",
                     "messages");
    }
    prompt = p.tokens;
    droppedTurns = p.droppedTurns;
  } else {
    CompletionRequest r = parseCompletionRequest(req.body);
    sampling = std::move(r.sampling);
    checkModel(sampling.model);
    prompt = tokenizer.encode(r.prompt, true, true);
    if (static_cast<int32_t>(prompt.size()) + 1 >= ctx) {
      throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                     "the prompt (" + std::to_string(prompt.size()) +
                         " tokens) does not fit this model's context of " + std::to_string(ctx) +
                         " tokens",
                     "prompt");
    }
  }

  // OpenAI's defaults: a chat reply runs until it ends (here: until the context is full), a
  // completion stops after 16 tokens.
  runtime::GenerateOptions g = generateOptions(sampling, m_options, chat ? ctx : 16);
  if (chat) {
    for (std::string& s : model::chatStopStrings(m_model.chatTemplate().format)) {
      g.stop.push_back(std::move(s));
    }
  }
  auto job = std::make_shared<GenerationJob>(std::move(prompt), std::move(g));
  if (!track(job))
    throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
  switch (m_queue.submit(job)) {
    case JobSink::Submit::Accepted:
      break;
    case JobSink::Submit::Full:
      res.set_header("Retry-After", "1");
      throw ApiError(429, "rate_limit_error", "rate_limit_exceeded",
                     "the server is busy: " + std::to_string(m_queue.maxWaiting()) +
                         " requests are already waiting; retry later");
    case JobSink::Submit::ShuttingDown:
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    case JobSink::Submit::Unavailable:
      throw ApiError(503, "server_error", "model_unavailable",
                     "no replica of the model is left to run the request");
  }
  if (droppedTurns > 0) res.set_header("X-Shoal-Dropped-Turns", std::to_string(droppedTurns));

  const std::string id =
      (chat ? "chatcmpl-" : "cmpl-") + randomHex() + std::to_string(m_nextId.fetch_add(1));
  const int64_t created = static_cast<int64_t>(std::time(nullptr));

  if (!sampling.stream) {
    job->waitFinished();
    reportFinished(*job);
    const runtime::GenerateResult& r = job->result();
    if (!job->error().empty()) throw ApiError(500, "server_error", "", job->error());
    if (r.finish == runtime::FinishReason::Cancelled) {
      throw ApiError(503, "server_error", "shutting_down", "the server is shutting down");
    }
    const Usage usage{r.promptTokens, static_cast<int32_t>(r.tokens.size())};
    const std::string reason = finishReasonFor(runtime::finishReasonName(r.finish));
    runtime::ReasoningSplit::Parts reply = splitReasoning
                                               ? runtime::ReasoningSplit::split(r.text)
                                               : runtime::ReasoningSplit::Parts{{}, r.text};
    json calls = json::array();
    int32_t callCount = 0;
    takeAddressedCalls(reply.addressed, toolsOffered, reply.content, calls, callCount, false);
    if (toolsOffered && toolSyntax != model::ToolCallSyntax::HarmonyRecipient) {
      const runtime::ToolCallSplit::Parts answer =
          runtime::ToolCallSplit::split(reply.content, toolSyntax);
      reply.content = answer.content;
      takeToolCalls(answer.calls, reply.content, calls, callCount, false);
    }
    res.set_content(dumpJson(chat ? chatCompletionJson(id, created, m_modelId, reply.content,
                                                       finishReasonWithCalls(reason, callCount),
                                                       usage, reply.reasoning, calls)
                                  : completionJson(id, created, m_modelId, r.text, reason, usage)),
                    "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  const bool includeUsage = sampling.includeUsageInStream;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, id, created, chat, includeUsage, splitReasoning, toolsOffered, toolSyntax](
          size_t, httplib::DataSink& sink) {
        auto send = [&sink](const std::string& event) {
          return sink.write(event.data(), event.size());
        };
        // Chat text as deltas: the reasoning block's part as reasoning_content, the rest as
        // content, and with tools offered each call the answer makes as a tool_calls delta of
        // its own; nothing is sent while a possible tag is held back.
        runtime::ReasoningSplit split;
        runtime::ToolCallSplit toolSplit(toolSyntax);
        int32_t callCount = 0;
        auto sendParts = [&](const std::string& reasoning, const std::string& content,
                             const json& calls) {
          if (reasoning.empty() && content.empty() && calls.empty()) return true;
          return send(sseEvent(chatChunkJson(
              id, created, m_modelId, std::nullopt,
              content.empty() ? std::nullopt : std::optional<std::string>(content), "", nullptr,
              reasoning.empty() ? std::nullopt : std::optional(reasoning), calls)));
        };
        auto sendAnswer = [&](const std::string& reasoning,
                              const runtime::ToolCallSplit::Parts& answer) {
          std::string content = answer.content;
          json calls = json::array();
          takeToolCalls(answer.calls, content, calls, callCount, true);
          return sendParts(reasoning, content, calls);
        };
        auto sendChat = [&](const runtime::ReasoningSplit::Parts& p) {
          std::string content = p.content;
          json calls = json::array();
          takeAddressedCalls(p.addressed, toolsOffered, content, calls, callCount, true);
          if (!toolsOffered || toolSyntax == model::ToolCallSyntax::HarmonyRecipient) {
            return sendParts(p.reasoning, content, calls);
          }
          runtime::ToolCallSplit::Parts answer = toolSplit.push(content);
          if (calls.empty()) return sendAnswer(p.reasoning, answer);
          return sendParts(p.reasoning, {}, calls) && sendAnswer({}, answer);
        };
        if (chat && !send(sseEvent(chatChunkJson(id, created, m_modelId, "assistant", "", "")))) {
          job->cancel();
          return false;
        }
        std::string text;
        for (;;) {
          const GenerationJob::Event ev = job->next(text, kStreamPoll);
          if (ev == GenerationJob::Event::Finished) break;
          if (ev == GenerationJob::Event::Timeout) {
            // Nothing to send: is the client still there? (A closed peer reads as not writable.)
            if (!sink.is_writable()) {
              job->cancel();
              return false;
            }
            continue;
          }
          const bool sent =
              !chat ? send(sseEvent(completionChunkJson(id, created, m_modelId, text, "")))
              : splitReasoning ? sendChat(split.push(text))
                               : sendChat({{}, text});
          if (!sent) {
            job->cancel();  // the client has gone: stop generating for it
            return false;
          }
        }
        reportFinished(*job);
        const runtime::GenerateResult& r = job->result();
        if (!job->error().empty() || r.finish == runtime::FinishReason::Cancelled) {
          // Headers are gone already: the error travels as an event, as OpenAI's streams do.
          const std::string message =
              job->error().empty() ? "generation cancelled (server shutting down)" : job->error();
          send(sseEvent(ApiError(500, "server_error", "", message).toJson()));
          sink.done();
          return true;
        }
        if (chat && splitReasoning) sendChat(split.finish());
        if (chat && toolsOffered && toolSyntax != model::ToolCallSyntax::HarmonyRecipient) {
          sendAnswer({}, toolSplit.finish());
        }
        const std::string reason =
            finishReasonWithCalls(finishReasonFor(runtime::finishReasonName(r.finish)), callCount);
        send(sseEvent(
            chat ? chatChunkJson(id, created, m_modelId, std::nullopt, std::nullopt, reason)
                 : completionChunkJson(id, created, m_modelId, "", reason)));
        if (includeUsage) {
          const Usage usage{r.promptTokens, static_cast<int32_t>(r.tokens.size())};
          send(sseEvent(
              chat ? chatChunkJson(id, created, m_modelId, std::nullopt, std::nullopt, "", &usage)
                   : completionChunkJson(id, created, m_modelId, "", "", &usage)));
        }
        send(kSseDone);
        sink.done();
        return true;
      },
      [job](bool) { job->cancel(); });  // however the response ended, its job ends too
}

void ApiServer::checkModel(const std::string& requested) const {
  if (requested == m_modelId || requested == m_model.path().filename().string() ||
      requested == "default") {
    return;
  }
  throw ApiError(404, "invalid_request_error", "model_not_found",
                 "the model '" + clipForMessage(requested) + "' does not exist; this server has '" +
                     m_modelId + "' (GET /v1/models)",
                 "model");
}

void ApiServer::reportFinished(const GenerationJob& job) const {
  if (!job.error().empty()) {
    std::fprintf(stderr, "shoal api: generation failed: %s\n", job.error().c_str());
  }
}

}  // namespace shoal::api
