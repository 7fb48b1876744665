#include "lan/api/replica_router.h"

#include <algorithm>

#include "engine/error.h"

namespace shoal::api {

ReplicaRouter::ReplicaRouter(std::vector<GenerationQueue*> replicas, Route route)
    : m_replicas(std::move(replicas)), m_route(std::move(route)), m_routed(m_replicas.size(), 0) {
  if (m_replicas.empty()) throw Error("ReplicaRouter: no replica");
  if (!m_route) throw Error("ReplicaRouter: no routing function");
}

ReplicaRouter::Submit ReplicaRouter::submit(const std::shared_ptr<GenerationJob>& job) {
  std::lock_guard lock(m_mutex);
  std::vector<QueueStats> loads;
  for (const GenerationQueue* q : m_replicas) loads.push_back(q->stats());
  const std::vector<size_t> order = m_route(loads);
  bool anyFull = false;
  bool any = false;
  for (size_t i : order) {
    if (i >= m_replicas.size()) continue;
    any = true;
    const Submit got = m_replicas[i]->submit(job);
    if (got == Submit::Accepted) {
      ++m_routed[i];
      return got;
    }
    anyFull = anyFull || got == Submit::Full;
  }
  if (!any) return Submit::Unavailable;
  if (anyFull) {
    ++m_rejected;
    return Submit::Full;
  }
  return Submit::ShuttingDown;
}

QueueStats ReplicaRouter::stats() const {
  QueueStats sum;
  for (const QueueStats& s : replicaStats()) {
    sum.waiting += s.waiting;
    sum.running += s.running;
    sum.slotCount += s.slotCount;
    sum.holding += s.holding;
    sum.completed += s.completed;
    sum.cancelled += s.cancelled;
    sum.generatedTokens += s.generatedTokens;
    sum.jobSeconds += s.jobSeconds;
  }
  std::lock_guard lock(m_mutex);
  sum.rejected = m_rejected;
  return sum;
}

std::vector<QueueStats> ReplicaRouter::replicaStats() const {
  std::vector<QueueStats> out;
  for (const GenerationQueue* q : m_replicas) out.push_back(q->stats());
  return out;
}

size_t ReplicaRouter::maxWaiting() const {
  size_t n = 0;
  for (const GenerationQueue* q : m_replicas) n += q->maxWaiting();
  return n;
}

size_t ReplicaRouter::slotCount() const {
  size_t n = 0;
  for (const GenerationQueue* q : m_replicas) n += q->slotCount();
  return n;
}

int32_t ReplicaRouter::contextLength() const {
  int32_t n = m_replicas.front()->contextLength();
  for (const GenerationQueue* q : m_replicas) n = std::min(n, q->contextLength());
  return n;
}

std::vector<uint64_t> ReplicaRouter::routed() const {
  std::lock_guard lock(m_mutex);
  return m_routed;
}

}  // namespace shoal::api
