#include "app/cli/pool_serve.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "app/cli/commands.h"
#include "engine/error.h"
#include "lan/api/generation_queue.h"
#include "lan/api/replica_router.h"

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
                  const std::string& pipeline,
                  const std::vector<runtime::ModelDrafter*>& drafters) {
  g_stopRequested.store(false);
  const StopSignals signals;
  coordinator.serve([&](std::vector<lan::Coordinator::ServedReplica>& replicas) {
    if (!drafters.empty() && drafters.size() != replicas.size()) {
      throw Error("one draft model per replica is needed (" + std::to_string(drafters.size()) +
                  " for " + std::to_string(replicas.size()) + ")");
    }
    // Each replica's worker owns its chain from here; a node's failure is repaired on it. The
    // waiting room is shared out among the replicas (a job refused by a full one goes to
    // another), so the HTTP threads' bound still holds.
    std::vector<std::unique_ptr<api::GenerationQueue>> queues;
    const size_t n = replicas.size();
    if (n == 0) throw Error("no replica to serve");
    for (size_t i = 0; i < n; ++i) {
      runtime::SchedulerOptions schedule = std::move(replicas[i].options);
      schedule.drafter = drafters.empty() ? nullptr : drafters[i];
      const size_t waiting =
          std::max<size_t>(1, options.maxQueued / n + (i < options.maxQueued % n));
      queues.push_back(std::make_unique<api::GenerationQueue>(
          *replicas[i].chain, coordinator.model().tokenizer(), waiting, std::move(schedule)));
    }
    std::vector<api::GenerationQueue*> raw;
    for (const auto& q : queues) raw.push_back(q.get());
    std::unique_ptr<api::ReplicaRouter> router;
    api::JobSink* sink = raw.at(0);
    if (n > 1) {
      router = std::make_unique<api::ReplicaRouter>(
          raw, [&coordinator](const std::vector<api::QueueStats>& stats) {
            std::vector<lan::Coordinator::ReplicaLoad> loads;
            for (const api::QueueStats& s : stats) {
              lan::Coordinator::ReplicaLoad l;
              l.sequences = static_cast<int>(s.holding);
              l.measuredSecondsPerToken =
                  s.generatedTokens > 0 ? s.jobSeconds / static_cast<double>(s.generatedTokens) : 0;
              loads.push_back(l);
            }
            // The routed replica, then (for when its queue is full) the other live ones, the
            // least loaded first; a retired replica (no stages) never.
            std::vector<size_t> order;
            const int chosen = coordinator.routeRequest(loads);
            if (chosen < 0) return order;
            order.push_back(static_cast<size_t>(chosen));
            std::vector<size_t> rest;
            for (size_t r = 0; r < stats.size(); ++r) {
              if (r != order.front() && !coordinator.deployed(r).empty()) rest.push_back(r);
            }
            std::stable_sort(rest.begin(), rest.end(), [&](size_t x, size_t y) {
              return stats[x].holding < stats[y].holding;
            });
            order.insert(order.end(), rest.begin(), rest.end());
            return order;
          });
      sink = router.get();
    }
    api::ApiServer server(coordinator.model(), *sink, options);
    try {
      server.bind();
    } catch (const Error& e) {
      throw CliExit{1, e.what()};
    }
    std::fprintf(stderr, "[pool: %s; %zu replies at once] API on http://%s:%d/v1%s\n",
                 pipeline.c_str(), sink->slotCount(), options.host.c_str(), server.port(),
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
    for (const auto& q : queues) q->shutdown();
    if (router) {
      const std::vector<uint64_t> routed = router->routed();
      std::string line;
      for (size_t i = 0; i < routed.size(); ++i) {
        line += (i ? ", " : "") + std::to_string(routed[i]);
      }
      std::fprintf(stderr, "[requests per replica: %s]\n", line.c_str());
    }
    std::fprintf(stderr, "[pool serve stopped]\n");
  });
}

}  // namespace shoal::cli
