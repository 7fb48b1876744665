#include "app/cli/pool_serve.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "app/cli/commands.h"
#include "engine/error.h"
#include "lan/api/generation_queue.h"

namespace shoal::cli {
namespace {

std::atomic<bool> g_stopRequested{false};

extern "C" void onStopSignal(int) { g_stopRequested.store(true); }

// Restores the previous handlers when serving ends.
struct StopSignals {
  void (*previousInt)(int) = std::signal(SIGINT, onStopSignal);
  void (*previousTerm)(int) = std::signal(SIGTERM, onStopSignal);
  ~StopSignals() {
    std::signal(SIGINT, previousInt);
    std::signal(SIGTERM, previousTerm);
  }
};

}  // namespace

void servePoolApi(lan::Coordinator& coordinator, const api::ApiServerOptions& options,
                  const std::string& pipeline, runtime::ModelDrafter* drafter) {
  g_stopRequested.store(false);
  const StopSignals signals;
  coordinator.serve([&](runtime::Chain& chain, runtime::SchedulerOptions schedule) {
    schedule.drafter = drafter;
    // The queue's worker owns the chain from here; a node's failure is repaired on it.
    api::GenerationQueue queue(chain, coordinator.model().tokenizer(), options.maxQueued,
                               std::move(schedule));
    api::ApiServer server(coordinator.model(), queue, options);
    try {
      server.bind();
    } catch (const Error& e) {
      throw CliExit{1, e.what()};
    }
    std::fprintf(stderr, "[pool: %s; %zu replies at once] API on http://%s:%d/v1%s\n",
                 pipeline.c_str(), queue.slotCount(), options.host.c_str(), server.port(),
                 options.apiKey.empty() ? "" : " (API key required)");
    // serve() blocks on the accept loop; a watcher turns the signal flag into stop().
    std::atomic<bool> served{false};
    std::thread watcher([&] {
      while (!g_stopRequested.load() && !served.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      server.stop();
    });
    server.serve();
    served.store(true);
    watcher.join();
    queue.shutdown();
    std::fprintf(stderr, "[pool serve stopped]\n");
  });
}

}  // namespace shoal::cli
