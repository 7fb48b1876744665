// shoal-node: the headless Shoal service. It is a pool member (lan/node's NodeService: TLS
// listener for coordinators, hosting remote stages, pairing, discovery beacons) and, when asked,
// serves the OpenAI-compatible API over one local model (lan/api).
//
// The API runs when --api, -m/--model, SHOAL_MODEL or an --api-* flag is given (so the systemd
// unit and the API tests keep their meaning); pool membership runs unless --no-pool. When the
// API runs, a pool that cannot start (no writable config directory, port taken) is logged and
// the API still serves.
//
// stdout gets one line at start: "shoal-node <name>: device <device ID> port <pool port>" (and
// the pairing code with --pair); logs go to stderr (journald picks them up under systemd).
// The pairing code is never logged: when stdout is the systemd journal (JOURNAL_STREAM names
// it), where every member of group adm could read it for as long as the journal is kept, the
// code goes to <config dir>/pairing-code (mode 0600, removed at exit) and stdout names that file.
// SIGTERM/SIGINT stop the servers, cancel the running generation and exit 0. SIGUSR1 shows a new
// pairing code the same way (a code pairs one device, once: `kill -USR1 <pid>` or
// `systemctl kill -s USR1 shoal-node` lets the next one pair without a restart).

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
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
#include "engine/runtime/draft_model_choice.h"
#include "engine/runtime/model_drafter.h"
#include "kernels/backend_registry.h"
#include "lan/api/api_server.h"
#include "lan/node/node_service.h"
#include "lan/transport/private_files.h"

namespace {

using namespace shoal;

// The context the node asks for when --ctx is not given: the model's training context, capped as
// shoal-cli and the desktop app cap it, so a small machine does not reserve a 128k-token cache.
constexpr int32_t kDefaultMaxContext = 4096;
constexpr auto kPairingValidity = std::chrono::minutes(5);

std::atomic<bool> g_stopRequested{false};

extern "C" void onStopSignal(int) { g_stopRequested.store(true); }
// SIGUSR1: show a new pairing code (each code pairs once; a second coordinator needs another).
std::atomic<bool> g_newCodeRequested{false};
extern "C" void onNewCodeSignal(int) { g_newCodeRequested.store(true); }

struct NodeOptions {
  std::string model;
  std::string name;
  std::string backend = "cpu";
  std::string device;
  int threads = 0;
  int contextLength = 0;
  int parallel = 4;      // API requests generated at once (KV slots of contextLength each)
  int stepTokens = 128;  // most rows one batch of the API's scheduler carries
  std::string draftModel = "auto";  // --draft-model: PATH, auto or none (draft_model_choice.h)
  bool api = false;                 // resolved in main(): serve the OpenAI API
  api::ApiServerOptions apiOptions;
  bool pool = true;
  lan::NodeServiceOptions service;
  bool pair = false;
};

// The local model, its one-stage chain (one KV slot per request run at once) and the API server
// over it.
struct ApiPart {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Chain> chain;
  // A draft model on the CPU (a KV slot per request run at once), or none.
  std::unique_ptr<model::Model> draftModel;
  std::unique_ptr<runtime::Backend> draftBackend;
  std::unique_ptr<runtime::Chain> draftChain;
  std::unique_ptr<runtime::ModelDrafter> drafter;
  std::unique_ptr<api::GenerationQueue> queue;  // its worker owns the chain
  std::unique_ptr<api::ApiServer> server;
};

// Loads the model and binds the API; prints the reason and returns the exit code on failure.
int startApi(const NodeOptions& o, ApiPart& part) {
  // Before the model loads: a refused configuration should not cost a load first.
  if (const std::string why = api::unsafeOptions(o.apiOptions); !why.empty()) {
    std::fprintf(stderr, "shoal-node: API: %s\n", why.c_str());
    return 2;
  }
  const std::string path = o.model.empty() ? model::defaultModelPath() : o.model;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    part.model = model::Model::load(path);
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  kernels::BackendOptions bo;
  bo.cpuThreads = o.threads;
  try {
    part.backend = kernels::createBackend(o.backend, bo);
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  if (const runtime::Availability a = part.backend->availability(); !a.available) {
    std::fprintf(stderr, "shoal-node: %s backend unavailable: %s\n", o.backend.c_str(),
                 a.reason.c_str());
    return 1;
  }
  const model::ModelConfig& c = part.model->config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength =
      o.contextLength > 0 ? o.contextLength : std::min(c.nCtxTrain, kDefaultMaxContext);
  spec.maxSequences = o.parallel;
  const runtime::ModelSource src{&part.model->file(), &part.model->config(),
                                 &part.model->weights()};
  const std::string device = o.device.empty() ? part.backend->devices().front().id : o.device;
  try {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(part.backend->createStage(device, src, spec));
    part.chain = std::make_unique<runtime::Chain>(std::move(stages));
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 2;
  }
  const double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  runtime::SchedulerOptions schedule;
  schedule.tokenBudget = std::max(o.stepTokens, o.parallel + 1);
  // A draft model proposes tokens where prompt lookup has none (speculative decoding).
  const std::filesystem::path draftPath =
      o.apiOptions.draftMax > 0
          ? runtime::chooseDraftModel(o.draftModel, path, part.model->tokenizer())
          : std::filesystem::path();
  if (!draftPath.empty()) {
    try {
      part.draftModel = model::Model::load(draftPath);
      const std::string why =
          runtime::draftVocabularyMismatch(part.model->tokenizer(), part.draftModel->tokenizer());
      if (!why.empty()) throw Error("draft model " + draftPath.string() + ": " + why);
      kernels::BackendOptions cpu;
      cpu.cpuThreads = o.threads;
      part.draftBackend = kernels::createBackend("cpu", cpu);
      runtime::StageSpec draftSpec = spec;
      draftSpec.lastLayer = part.draftModel->config().nLayer;
      const runtime::ModelSource draftSrc{&part.draftModel->file(), &part.draftModel->config(),
                                          &part.draftModel->weights()};
      std::vector<std::unique_ptr<runtime::Stage>> stages;
      stages.push_back(part.draftBackend->createStage(part.draftBackend->devices().front().id,
                                                      draftSrc, draftSpec));
      part.draftChain = std::make_unique<runtime::Chain>(std::move(stages));
      part.drafter = std::make_unique<runtime::ModelDrafter>(*part.draftChain);
    } catch (const Error& e) {
      std::fprintf(stderr, "shoal-node: %s\n", e.what());
      return 2;
    }
    schedule.drafter = part.drafter.get();
    std::fprintf(stderr, "shoal-node: draft model %s\n", draftPath.string().c_str());
  }
  part.queue = std::make_unique<api::GenerationQueue>(*part.chain, part.model->tokenizer(),
                                                      o.apiOptions.maxQueued, schedule);
  part.server = std::make_unique<api::ApiServer>(*part.model, *part.queue, o.apiOptions);
  try {
    part.server->bind();
  } catch (const Error& e) {
    std::fprintf(stderr, "shoal-node: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "shoal-node%s%s: model %s (%s, context %d x %d parallel, %s on %s) loaded in %.2f "
               "s; API on http://%s:%d/v1%s\n",
               o.name.empty() ? "" : " ", o.name.c_str(), part.server->modelId().c_str(),
               c.architecture.c_str(), part.queue->contextLength(), o.parallel,
               part.backend->name().c_str(), device.c_str(), loadSeconds, o.apiOptions.host.c_str(),
               part.server->port(), o.apiOptions.apiKey.empty() ? "" : " (API key required)");
  return 0;
}

// Starts pool membership; nullptr (with the reason on stderr) when it cannot.
// Whether stdout is the systemd journal: systemd sets JOURNAL_STREAM to "<device>:<inode>" of
// the stream it connected (systemd.exec(5)), compared with what stdout is now.
bool stdoutIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  unsigned long long device = 0, inode = 0;
  if (!stream || std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == device &&
         static_cast<unsigned long long>(st.st_ino) == inode;
}

// Where the pairing code goes when stdout is the journal.
std::filesystem::path pairingCodeFile(const NodeOptions& o) {
  return o.service.configDir / "pairing-code";
}

// Shows the pairing code to the person at this machine, never to the logs (see the top).
void showPairingCode(const NodeOptions& o, const std::string& name, const std::string& code) {
  if (stdoutIsJournal()) {
    const std::filesystem::path file = pairingCodeFile(o);
    try {
      lan::replaceFileDurably(file, code + "\n", lan::kPrivateFileMode);
      std::printf("shoal-node %s: pairing code in %s (valid 5 minutes; not logged)\n", name.c_str(),
                  file.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: pairing code not shown: %s\n", e.what());
    }
    return;
  }
  std::printf("shoal-node %s: pairing code %s (valid 5 minutes)\n", name.c_str(), code.c_str());
}

std::unique_ptr<lan::NodeService> startPool(const NodeOptions& o) {
  try {
    auto service = std::make_unique<lan::NodeService>(o.service);
    std::printf("shoal-node %s: device %s port %u\n", service->name().c_str(),
                service->deviceId().c_str(), unsigned(service->port()));
    std::fprintf(stderr, "shoal-node %s: pool member, device %s, port %u, %zu device(s)\n",
                 service->name().c_str(), service->deviceId().c_str(), unsigned(service->port()),
                 service->host().devices().size());
    if (o.pair) {
      showPairingCode(o, service->name(), service->startPairing(kPairingValidity));
    }
    std::fflush(stdout);
    return service;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-node: pool membership not started: %s\n", e.what());
    return nullptr;
  }
}

int run(const NodeOptions& o) {
  ApiPart apiPart;
  if (o.api) {
    if (const int rc = startApi(o, apiPart); rc != 0) return rc;
  }
  // Signal handlers only set a flag; this thread turns it into a stop (stop() takes locks).
  // Installed before the pool prints its start line: whoever waits for that line may stop us
  // at once, and must get a clean stop (the pairing-code file removed), not SIGTERM's default.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGTERM, onStopSignal);
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGUSR1, onNewCodeSignal);
  std::unique_ptr<lan::NodeService> service;
  if (o.pool) {
    service = startPool(o);
    if (!service && !o.api) return 1;
  }
  if (!o.api && !o.pool) {
    std::fprintf(stderr, "shoal-node: nothing to do (--no-pool without the API)\n");
    return 2;
  }

  // The signals' flags, seen every 100 ms by this thread or the API's watcher.
  auto serveSignals = [&] {
    if (g_newCodeRequested.exchange(false) && service) {
      showPairingCode(o, service->name(), service->startPairing(kPairingValidity));
      std::fflush(stdout);
    }
  };
  if (apiPart.server) {
    std::atomic<bool> served{false};
    std::thread watcher([&] {
      while (!g_stopRequested.load() && !served.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        serveSignals();
      }
      if (g_stopRequested.load()) std::fprintf(stderr, "shoal-node: stopping\n");
      apiPart.server->stop();
    });
    apiPart.server->serve();
    served.store(true);
    watcher.join();
  } else {
    while (!g_stopRequested.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      serveSignals();
    }
    std::fprintf(stderr, "shoal-node: stopping\n");
  }
  if (service) service->stop();
  std::error_code ec;
  std::filesystem::remove(pairingCodeFile(o), ec);  // a code of this run is useless after it
  std::fprintf(stderr, "shoal-node: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-node: headless Shoal service (pool member; OpenAI-compatible API)"};
  NodeOptions o;
  std::string configDir, modelsDir;
  bool printDeviceId = false, noDiscovery = false, noPool = false;
  int port = lan::kDefaultNodePort;
  app.add_option("-m,--model", o.model,
                 "GGUF model file for the API (default: the default model); enables the API");
  app.add_option("--name", o.name, "this node's name (default: the host name)");
  app.add_option("--threads", o.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--backend", o.backend, "compute backend of the API's model")
      ->capture_default_str();
  app.add_option("--device", o.device, "device id of the API's model (see shoal-cli devices)");
  app.add_option("--ctx", o.contextLength, "context length in tokens (default: min(model, 4096))")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--parallel", o.parallel,
                 "API requests generated at once, batched together (each holds a KV cache of "
                 "--ctx tokens); more wait in the queue")
      ->capture_default_str()
      ->check(CLI::Range(1, static_cast<int>(api::kMaxParallel)));
  app.add_option("--step-tokens", o.stepTokens,
                 "most tokens one batch carries (decode rows first, then prompt chunks): lower "
                 "keeps replies under way smooth while a long prompt is read, higher reads "
                 "prompts faster")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  app.add_option("--draft-max", o.apiOptions.draftMax,
                 "most tokens drafted per step by prompt lookup for API replies (speculative "
                 "decoding: greedy replies unchanged, sampled ones keep their distribution); 0 = "
                 "off")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option(
         "--draft-model", o.draftModel,
         "a small model with the same vocabulary that drafts tokens for API replies where "
         "prompt lookup has none, on this machine's CPU (a GGUF path; auto: the largest one "
         "at most 1/8 of the model's size next to it or in the model folders; none)")
      ->capture_default_str();
  app.add_flag("--api", o.api, "serve the OpenAI-compatible API over the model");
  auto* apiHost = app.add_option("--api-host", o.apiOptions.host, "address the API listens on")
                      ->capture_default_str();
  auto* apiPort = app.add_option("--api-port", o.apiOptions.port, "API port (0: any free port)")
                      ->capture_default_str()
                      ->check(CLI::Range(0, 65535));
  // The key belongs in SHOAL_API_KEY (e.g. the systemd unit's EnvironmentFile): a command line is
  // visible to every local user in ps. --api-key stays for scripts that already use it.
  auto* apiKey = app.add_option("--api-key", o.apiOptions.apiKey,
                                "require 'Authorization: Bearer <key>' on the API (better: set "
                                "SHOAL_API_KEY; command lines show in ps); needed beyond loopback")
                     ->envname("SHOAL_API_KEY");
  app.add_option("--max-queue", o.apiOptions.maxQueued,
                 "requests that may wait for a free slot (--parallel) before 429")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, api::kMaxQueuedRequests));
  app.add_option("--port", port, "TCP port coordinators connect to (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--bind", o.service.bindHost, "address the pool listener binds")
      ->capture_default_str();
  app.add_option("--models-dir", modelsDir, "directory of GGUF files this node may load itself");
  app.add_option("--config-dir", configDir,
                 "identity, trusted devices and weight cache (default: $XDG_CONFIG_HOME/shoal)");
  app.add_option("--trust", o.service.trust, "trust this device ID (repeatable)");
  app.add_flag("--pair", o.pair, "print a pairing code valid 5 minutes and accept pairing");
  app.add_flag("--no-discovery", noDiscovery, "do not send or listen for LAN beacons");
  double shardCacheGb = 0;
  app.add_option("--shard-cache-max-gb", shardCacheGb,
                 "cap of the cache of weights streamed to this node, in GiB; least recently used "
                 "shards are evicted (default: 1/4 of the free disk, at most 256)")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option("--discovery-port", o.service.discoveryPort,
                 "UDP port of LAN discovery beacons (0: any free port, for tests)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_flag("--rotate-identity-on-clash", o.service.rotateIdentityOnProvenClash,
               "take a new identity when another machine proves it holds a copy of ours "
               "(default: only report it)");
  app.add_flag("--no-pool", noPool, "API only: no pool listener");
  app.add_flag("--reprofile", o.service.reprofile,
               "measure the CPU's bandwidth and FLOP/s again (cached in the config dir)");
  app.add_flag("--print-device-id", printDeviceId,
               "print this node's device ID (creating the identity if needed) and exit");
  CLI11_PARSE(app, argc, argv);

  o.service.configDir =
      configDir.empty() ? lan::defaultConfigDir() : std::filesystem::path(configDir);
  if (printDeviceId) {
    try {
      std::printf("%s\n", lan::nodeDeviceId(o.service.configDir).c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: %s\n", e.what());
      return 1;
    }
  }
  o.service.name = o.name;
  o.service.modelsDir = modelsDir;
  o.service.port = static_cast<uint16_t>(port);
  o.service.cpuThreads = o.threads;
  o.service.discovery = !noDiscovery;
  o.service.shardCacheMaxBytes = static_cast<uint64_t>(shardCacheGb * double(uint64_t{1} << 30));
  o.pool = !noPool;
  const char* envModel = std::getenv("SHOAL_MODEL");
  o.api = o.api || !o.model.empty() || (envModel && *envModel) || apiHost->count() > 0 ||
          apiPort->count() > 0 || apiKey->count() > 0;
  return run(o);
}
