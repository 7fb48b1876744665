// shoal-node: the headless Shoal service. Today it loads one model and serves the OpenAI-compatible
// API over it (lan/api); pool membership (discovery, pairing, hosting remote stages) comes with the
// LAN work and has no flags yet.
//
// Logs go to stderr (journald picks them up under systemd). SIGTERM/SIGINT stop the server,
// cancel the running generation and exit 0.

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "engine/error.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/api/api_server.h"

namespace {

using namespace shoal;

// The context the node asks for when --ctx is not given: the model's training context, capped as
// shoal-cli and the desktop app cap it, so a small machine does not reserve a 128k-token cache.
constexpr int32_t kDefaultMaxContext = 4096;

std::atomic<bool> g_stopRequested{false};

extern "C" void onStopSignal(int) { g_stopRequested.store(true); }

struct NodeOptions {
  std::string model;
  std::string name;
  std::string backend = "cpu";
  std::string device;
  int threads = 0;
  int contextLength = 0;
  api::ApiServerOptions api;
};

int run(const NodeOptions& o) {
  const std::string path = o.model.empty() ? model::defaultModelPath() : o.model;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<model::Model> loaded;
  try {
    loaded = model::Model::load(path);
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  kernels::BackendOptions bo;
  bo.cpuThreads = o.threads;
  std::unique_ptr<runtime::Backend> backend;
  try {
    backend = kernels::createBackend(o.backend, bo);
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  if (const runtime::Availability a = backend->availability(); !a.available) {
    std::fprintf(stderr, "shoal-node: %s backend unavailable: %s\n", o.backend.c_str(),
                 a.reason.c_str());
    return 1;
  }
  const model::ModelConfig& c = loaded->config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength =
      o.contextLength > 0 ? o.contextLength : std::min(c.nCtxTrain, kDefaultMaxContext);
  const runtime::ModelSource src{&loaded->file(), &loaded->config(), &loaded->weights()};
  const std::string device = o.device.empty() ? backend->devices().front().id : o.device;
  std::unique_ptr<runtime::Chain> chain;
  try {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(backend->createStage(device, src, spec));
    chain = std::make_unique<runtime::Chain>(std::move(stages));
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  runtime::Session session(*chain, loaded->tokenizer());
  const double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  api::ApiServer server(*loaded, session, o.api);
  try {
    server.bind();
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "shoal-node%s%s: model %s (%s, context %d, %s on %s) loaded in %.2f s; "
               "API on http://%s:%d/v1%s\n",
               o.name.empty() ? "" : " ", o.name.c_str(), server.modelId().c_str(),
               c.architecture.c_str(), session.contextLength(), backend->name().c_str(),
               device.c_str(), loadSeconds, o.api.host.c_str(), server.port(),
               o.api.apiKey.empty() ? "" : " (API key required)");

  // Signal handlers only set a flag; this thread turns it into a stop (stop() takes locks).
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGTERM, onStopSignal);
  std::signal(SIGINT, onStopSignal);
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!g_stopRequested.load() && !served.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (g_stopRequested.load()) std::fprintf(stderr, "shoal-node: stopping\n");
    server.stop();
  });
  server.serve();
  served.store(true);
  watcher.join();
  std::fprintf(stderr, "shoal-node: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-node: headless Shoal service (OpenAI-compatible API over a local model)"};
  NodeOptions o;
  app.add_option("-m,--model", o.model, "GGUF model file (default: the default model)");
  app.add_option("--name", o.name, "this node's name (shown in logs)");
  app.add_option("--threads", o.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--backend", o.backend, "compute backend")->capture_default_str();
  app.add_option("--device", o.device, "device id (see shoal-cli devices)");
  app.add_option("--ctx", o.contextLength, "context length in tokens (default: min(model, 4096))")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--api-host", o.api.host, "address the API listens on")->capture_default_str();
  app.add_option("--api-port", o.api.port, "API port (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--api-key", o.api.apiKey,
                 "require 'Authorization: Bearer <key>' on /v1/* (or SHOAL_API_KEY)")
      ->envname("SHOAL_API_KEY");
  app.add_option("--max-queue", o.api.maxQueued,
                 "requests that may wait behind the running one before 429")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
