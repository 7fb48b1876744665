#pragma once
// Requests over several replicas of the model: the pool's pipelines, each run by a
// GenerationQueue of its own (one worker, one scheduler, one chain). A new job goes to the
// replica that a routing function picks from their live loads — the coordinator's phase 2
// (lan/pool/coordinator.h routeRequest: the planner's cost of each pipeline stretched by its
// queue, scaled to what it measured). A job stays on its replica to the end: its KV cache is
// there.
//
// Threading: submit() and the stats may be called from any thread (the API's HTTP threads);
// submissions are routed one at a time, so two bursts never both see the same replica idle.

#include <functional>
#include <mutex>
#include <vector>

#include "lan/api/generation_queue.h"

namespace shoal::api {

class ReplicaRouter final : public JobSink {
 public:
  // The replicas to try for the next job, in order, given each replica's stats (indices in the
  // order given to the constructor): the routed one first, then those that may take it when
  // that one's queue is full. Empty when none can (every one retired).
  using Route = std::function<std::vector<size_t>(const std::vector<QueueStats>& replicas)>;

  // `replicas` (at least one) must outlive the router.
  ReplicaRouter(std::vector<GenerationQueue*> replicas, Route route);

  // To the first replica of the route that accepts it (Full when every one was full,
  // Unavailable when the route is empty).
  Submit submit(const std::shared_ptr<GenerationJob>& job) override;
  QueueStats stats() const override;
  std::vector<QueueStats> replicaStats() const override;
  size_t maxWaiting() const override;      // the replicas' sum
  size_t slotCount() const override;       // the replicas' sum
  int32_t contextLength() const override;  // the smallest replica's

  // Jobs routed to each replica so far.
  std::vector<uint64_t> routed() const;

 private:
  const std::vector<GenerationQueue*> m_replicas;
  const Route m_route;
  mutable std::mutex m_mutex;
  std::vector<uint64_t> m_routed;
  uint64_t m_rejected = 0;  // Full from every replica (each counted its own refusal too)
};

}  // namespace shoal::api
