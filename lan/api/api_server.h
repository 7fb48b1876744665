#pragma once
// The OpenAI-compatible HTTP API over one loaded model: POST /v1/chat/completions,
// POST /v1/completions (both streamed as server-sent events or not), GET /v1/models,
// GET /health. HTTP is cpp-httplib (Debian's libcpp-httplib); bodies are nlohmann/json; the wire
// format lives in openai_protocol.h and the scheduling in generation_queue.h.
//
// Requests are validated and tokenized on the HTTP thread (the tokenizer is immutable), so a bad
// request or a prompt that cannot fit is answered 400 before it takes a place in the queue.
// Generation happens on the queue's single worker (generation_queue.h, shared with the desktop
// app's chat), which batches every running request into each step (continuous batching: as many
// at once as the chain has KV slots, the rest first come first served); a full queue answers 429
// with Retry-After. A streaming client that disconnects cancels
// its job.
//
// Before any body byte is read, request_guard.h checks the request's head (Host/Origin on
// loopback, API key, method, Content-Length, Content-Type); see lan/api/README.md for the threat
// model and every limit.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "lan/api/generation_queue.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace shoal::api {

class BoundedHttpServer;

// HTTP threads: cpp-httplib serves each connection on a pool thread, and a request waiting in the
// queue (or streaming) holds its thread. The cap bounds what a flood of connections can hold:
// threads × (kMaxBodyBytes + its parsed JSON) of memory. The waiting requests and the spare
// threads share this cap; the running streams add at most kMaxParallel more.
inline constexpr size_t kMaxHttpThreads = 64;
// Threads beyond the queue and the running streams: room for /health, /v1/models and requests
// that are answered with an error without queueing.
inline constexpr size_t kSpareHttpThreads = 16;
// Streams that run at once (the chain's KV slots) each hold a thread too; the pool grows by at
// most this many for them: at most 80 threads in all, about 80 × 18 MB of bodies worst case.
inline constexpr size_t kMaxParallel = 16;
// Accepted connections waiting for an HTTP thread: each is an open descriptor, and cpp-httplib's
// own pool queues them without limit (idle connections would pile up until EMFILE, which the pool
// listener of the same process would hit too). 64 more than the threads keeps the API under 128
// sockets, far below the usual 1024-descriptor limit; beyond it the accept loop waits and new
// connections wait in the kernel's listen backlog, which costs no descriptor.
inline constexpr size_t kMaxPendingConnections = 64;
// The most --max-queue may be: every waiting request needs its thread under the cap.
inline constexpr size_t kMaxQueuedRequests = kMaxHttpThreads - kSpareHttpThreads;

struct ApiServerOptions {
  std::string host = "127.0.0.1";  // loopback unless the user asks for more (then a key is due)
  int port = 8080;                 // 0: pick a free port (see ApiServer::port())
  std::string apiKey;              // non-empty: everything but /health needs "Bearer <key>"
  size_t maxQueued = kMaxQueuedRequests;  // jobs waiting for a KV slot before 429
  std::string modelId;                    // empty: the model file's name without ".gguf"
  int32_t defaultTopK = 40;               // top-k/min-p are not OpenAI parameters; Shoal's defaults
  float defaultMinP = 0.05f;
  // Speculative decoding by prompt lookup (runtime::PromptLookupParams::maxDraft; 0: off): a
  // greedy reply stays byte for byte the same, a sampled one keeps its distribution.
  int32_t draftMax = 8;
};

// Why these options must not be served, or empty when they may: a host beyond loopback without
// an API key (anyone on the network could use the model; a LAN is not a trust boundary), or a
// queue longer than kMaxQueuedRequests. ApiServer's constructor and bind() enforce it; a program
// may call it first to fail before loading a model.
std::string unsafeOptions(const ApiServerOptions& options);

class ApiServer {
 public:
  // `model` and `queue` (the generation worker over the model's chain, which the desktop app's
  // chat submits to as well, or a router over the pool's replicas) must outlive the server.
  // Requests run at once up to the queue's slots; options.maxQueued is for the HTTP threads and
  // should be the queue's maxWaiting.
  ApiServer(const model::Model& model, JobSink& queue, ApiServerOptions options);
  ~ApiServer();  // stop()

  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Bind the socket; throws shoal::Error with the address when it cannot (in use, no such host)
  // or must not (unsafeOptions()).
  void bind();
  // Serve until stop() (blocks; call from the thread that should run the accept loop).
  void serve();
  // Stop accepting, cancel this server's running and queued generations (not the queue's other
  // users'), and make serve() return. Safe from any thread (not from a signal handler: use a
  // flag and a watcher thread there).
  void stop();

  int port() const { return m_port; }  // the bound port (after bind())
  const std::string& modelId() const { return m_modelId; }

 private:
  void installRoutes();
  // POST /v1/chat/completions (chat) or /v1/completions; throws ApiError for the client's errors.
  void handleGeneration(const httplib::Request& req, httplib::Response& res, bool chat);
  // Throws ApiError 404 unless `requested` names this server's model (its id, its file name, or
  // "default").
  void checkModel(const std::string& requested) const;
  void reportFinished(const GenerationJob& job) const;  // logs a failed generation to stderr
  // Remembers a job so that stop() can cancel it; false once stopping (then it must not run).
  bool track(const std::shared_ptr<GenerationJob>& job);

  const model::Model& m_model;
  ApiServerOptions m_options;
  std::string m_modelId;
  int64_t m_created = 0;        // model "created" timestamp: when the server started
  bool m_loopbackBind = true;   // the host is loopback: the guard checks Host and Origin
  int32_t m_contextLength = 0;  // the chain's, read once: the worker owns the chain
  uint64_t m_kvCacheBytes = 0;  // the KV budget of every slot (kv_footprint.h, as the planner)
  int m_port = 0;
  std::atomic<uint64_t> m_nextId{1};
  JobSink& m_queue;
  std::mutex m_jobsMutex;                            // guards the two below
  std::vector<std::weak_ptr<GenerationJob>> m_jobs;  // submitted by this server, maybe finished
  bool m_stopping = false;
  std::unique_ptr<BoundedHttpServer> m_http;
};

}  // namespace shoal::api
