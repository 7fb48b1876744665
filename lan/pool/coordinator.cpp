#include "lan/pool/coordinator.h"

#include <algorithm>
#include <utility>

#include "engine/error.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "engine/plan/planner.h"
#include "engine/plan/replan.h"
#include "engine/plan/routing.h"
#include "engine/runtime/scheduler.h"
#include "lan/pool/cached_layout.h"
#include "lan/pool/forward_fields.h"
#include "lan/pool/sha256.h"
#include "lan/pool/snapshot.h"

namespace shoal::lan {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

plan::PlanOptions singleChatOptions() {
  plan::PlanOptions o;
  o.maxPipelines = 1;  // one chat: every device serves the one pipeline the user talks to
  return o;
}

}  // namespace

Coordinator::Coordinator(Connector connector, CoordinatorOptions options)
    : m_connector(std::move(connector)), m_options(std::move(options)) {
  if (!m_connector) throw Error("Coordinator: no connector");
}

Coordinator::~Coordinator() {
  stopTelemetry();
  std::lock_guard lock(m_mutex);
  for (auto& [id, member] : m_members) member.client->close();
}

void Coordinator::log(const std::string& line) const {
  if (m_options.log) m_options.log(line);
}

std::string Coordinator::addNode(const std::string& address) {
  auto client = std::make_shared<NodeClient>(m_connector(address), m_options.requestTimeout);
  NodeInfo info = client->info();
  std::lock_guard lock(m_mutex);
  if (m_members.count(info.deviceId)) {
    client->close();
    throw Error("node " + info.deviceId + " (" + address + ") is already a member");
  }
  const std::string id = info.deviceId;
  Member m;
  m.address = address;
  m.link.nodeId = id;
  m.info = std::move(info);
  m.client = std::move(client);
  log("node " + m.info.name + " (" + id + ") at " + address + ": " +
      std::to_string(m.info.devices.size()) + " device(s)");
  m_members.emplace(id, std::move(m));
  m_memberOrder.push_back(id);
  return id;
}

void Coordinator::removeNode(const std::string& nodeId) {
  std::lock_guard lock(m_mutex);
  const auto it = m_members.find(nodeId);
  if (it == m_members.end()) return;
  it->second.client->close();
  m_members.erase(it);
  std::erase(m_memberOrder, nodeId);
}

std::vector<NodeInfo> Coordinator::nodes() const {
  std::lock_guard lock(m_mutex);
  std::vector<NodeInfo> out;
  for (const std::string& id : m_memberOrder) out.push_back(m_members.at(id).info);
  return out;
}

std::shared_ptr<NodeClient> Coordinator::clientOf(const std::string& nodeId) const {
  std::lock_guard lock(m_mutex);
  const auto it = m_members.find(nodeId);
  if (it == m_members.end()) throw Error("node " + nodeId + " is not a member of the pool");
  return it->second.client;
}

std::string Coordinator::nodeName(const std::string& nodeId) const {
  std::lock_guard lock(m_mutex);
  const auto it = m_members.find(nodeId);
  return it == m_members.end() ? nodeId : it->second.info.name;
}

void Coordinator::profileLinks() {
  std::vector<std::pair<std::string, std::shared_ptr<NodeClient>>> clients;
  {
    std::lock_guard lock(m_mutex);
    for (const std::string& id : m_memberOrder) clients.emplace_back(id, m_members.at(id).client);
  }
  for (const auto& [id, client] : clients) {
    std::vector<double> rtts;
    for (int i = 0; i < std::max(1, m_options.pingSamples); ++i) rtts.push_back(client->ping());
    std::sort(rtts.begin(), rtts.end());
    NodeLinkProfile p;
    p.nodeId = id;
    p.rttS = rtts[rtts.size() / 2];
    if (m_options.bandwidthProbeBytes > 0) {
      p.bandwidthBytesPerS = client->probeBandwidth(m_options.bandwidthProbeBytes);
    }
    std::lock_guard lock(m_mutex);
    if (const auto it = m_members.find(id); it != m_members.end()) it->second.link = p;
  }
}

std::vector<NodeLinkProfile> Coordinator::links() const {
  std::lock_guard lock(m_mutex);
  std::vector<NodeLinkProfile> out;
  for (const std::string& id : m_memberOrder) out.push_back(m_members.at(id).link);
  return out;
}

void Coordinator::setModel(const std::filesystem::path& ggufPath) {
  auto loaded = model::Model::load(ggufPath);
  ModelIdentity identity;
  identity.sha256 = sha256FileHex(ggufPath);
  identity.name = ggufPath.filename().string();
  identity.size = loaded->file().fileSize();
  const plan::ModelCost cost = plan::modelCostFromGguf(loaded->file(), m_options.contextLength);
  std::lock_guard lock(m_mutex);
  for (const auto& r : m_replicas) {
    if (!r->stages.empty()) throw Error("setModel: a model is deployed; the pool must be idle");
  }
  m_model = std::move(loaded);
  m_modelIdentity = std::move(identity);
  m_modelCost = cost;
}

const model::Model& Coordinator::model() const {
  if (!m_model) throw Error("no model set (setModel)");
  return *m_model;
}

plan::Pool Coordinator::poolWithout(const std::vector<std::string>& excluded) const {
  std::vector<NodeInfo> infos;
  std::vector<NodeLinkProfile> profiles;
  NodePairRtts pairRtts;
  uint64_t cap = 0;
  {
    std::lock_guard lock(m_mutex);
    for (const std::string& id : m_memberOrder) {
      if (std::find(excluded.begin(), excluded.end(), id) != excluded.end()) continue;
      infos.push_back(m_members.at(id).info);
      profiles.push_back(m_members.at(id).link);
    }
    cap = m_options.maxDeviceMemoryBytes;
    pairRtts = m_pairRtts;
  }
  plan::Pool p = buildPool(infos, profiles, pairRtts);
  if (cap > 0) {
    for (plan::Device& d : p.devices)
      d.memoryBytes = std::min(d.memoryBytes, static_cast<double>(cap));
  }
  return p;
}

plan::Pool Coordinator::pool() const { return poolWithout({}); }

void Coordinator::setMaxDeviceMemory(uint64_t bytes) {
  std::lock_guard lock(m_mutex);
  m_options.maxDeviceMemoryBytes = bytes;
}

plan::Plan Coordinator::makePlan() const {
  if (!m_model) throw Error("no model set (setModel)");
  const plan::Pool p = pool();
  if (p.devices.empty()) throw Error("the pool has no devices (add nodes first)");
  plan::Request request;
  request.contextTokens = m_options.contextLength;
  request.sequences = m_options.maxSequences;
  plan::PlanOptions options;
  options.maxPipelines = std::max(0, m_options.maxPipelines);
  plan::Plan best = plan::plan(p, m_modelCost, request, options);
  // Shards the nodes hold from earlier runs are reused where that costs under 5% of speed (a
  // one-pipeline layout: a plan of replicas stays as it is).
  if (best.pipelines.size() > 1) return best;
  return preferCachedShards(best, p, m_modelCost, request, holdings(), m_modelIdentity.sha256);
}

std::vector<NodeInfo> Coordinator::holdings() const {
  std::vector<NodeInfo> out = nodes();
  std::lock_guard lock(m_mutex);
  for (const auto& replica : m_replicas) {
    for (const auto& stage : replica->stages) {
      const StagePlacement& s = stage->placement();
      for (NodeInfo& n : out) {
        if (n.deviceId == s.nodeId) {
          n.shards.push_back({m_modelIdentity.sha256, s.firstLayer, s.lastLayer});
        }
      }
    }
  }
  return out;
}

void Coordinator::deploy(const plan::Plan& plan, const DeployCallback& progress) {
  std::lock_guard run(m_runMutex);
  if (!m_model) throw Error("no model set (setModel)");
  std::vector<std::vector<StagePlacement>> pipelines;
  std::vector<StagePlacement> want;
  for (size_t i = 0; i < (plan.feasible ? plan.pipelines.size() : 1); ++i) {
    pipelines.push_back(pipelineStages(plan, i));  // throws for an infeasible plan
    want.insert(want.end(), pipelines.back().begin(), pipelines.back().end());
  }
  // The next generation starts over on the new stages (their caches are not the session's).
  m_session.reset();
  resetChains();
  LiveStages before;
  {
    std::lock_guard lock(m_mutex);
    for (const auto& r : m_replicas)
      before.insert(before.end(), r->stages.begin(), r->stages.end());
  }
  bool unloadedAny = false;
  LiveStages loaded;
  auto forgetReplicas = [&] {
    // The old replicas lost the stages unloaded: none is left (generate() refuses until the
    // next deploy). The new stages are unloaded as the last references to them go
    // (RemoteStage's destructor), so the next deploy finds their memory free.
    if (!unloadedAny) return;
    std::lock_guard lock(m_mutex);
    m_replicas.clear();
  };
  try {
    loaded = loadStages(before, want, progress, unloadedAny);
  } catch (const StageFailure& f) {
    forgetReplicas();
    throw Error("node " + nodeName(f.nodeId) + " failed while loading: " + f.cause);
  } catch (...) {
    forgetReplicas();
    throw;
  }
  std::vector<std::unique_ptr<Replica>> replicas;
  size_t at = 0;
  for (size_t i = 0; i < pipelines.size(); ++i) {
    auto r = std::make_unique<Replica>();
    const auto first = loaded.begin() + static_cast<std::ptrdiff_t>(at);
    r->stages.assign(first, first + static_cast<std::ptrdiff_t>(pipelines[i].size()));
    r->predictedTokensPerS = plan.pipelines[i].throughputTokS;
    at += pipelines[i].size();
    replicas.push_back(std::move(r));
  }
  {
    std::lock_guard lock(m_mutex);
    m_replicas = std::move(replicas);
  }
  for (size_t r = 0; r < pipelines.size(); ++r) linkHops(r);
}

Coordinator::LiveStages Coordinator::loadStages(const LiveStages& before,
                                                const std::vector<StagePlacement>& stages,
                                                const DeployCallback& progress, bool& unloadedAny) {
  unloadedAny = false;
  // A stage already loaded exactly as wanted keeps its weights (its KV cache is reset by the
  // next generation).
  LiveStages reuse(stages.size());
  std::vector<bool> kept(before.size(), false);
  for (size_t i = 0; i < stages.size(); ++i) {
    for (size_t b = 0; b < before.size(); ++b) {
      if (!kept[b] && before[b]->placement() == stages[i] && before[b]->client()->isOpen()) {
        kept[b] = true;
        reuse[i] = before[b];
        break;
      }
    }
  }
  // The stages not kept are unloaded before anything new loads: a node's memory (and stage
  // count) is a budget its loaded stages hold until they unload, so a replacement loaded beside
  // the stage it replaces would need room for both. Stages of a node that is gone (closed
  // client: recovery) have nothing to unload.
  for (size_t b = 0; b < before.size(); ++b) {
    if (kept[b] || !before[b]->client()->isOpen()) continue;
    unloadedAny = true;
    try {
      before[b]->unload();
    } catch (const std::exception& e) {
      // Best effort: the node frees the stage when the connection closes anyway; a node that
      // is gone fails its load below (StageFailure).
      log("unload of " + before[b]->stageId() + " failed: " + e.what());
    }
  }
  LiveStages after;
  for (size_t i = 0; i < stages.size(); ++i) {
    const StagePlacement& want = stages[i];
    DeployProgress dp;
    dp.stage = i;
    dp.stages = stages.size();
    dp.nodeName = nodeName(want.nodeId);
    if (reuse[i]) {
      after.push_back(reuse[i]);
    } else {
      std::shared_ptr<NodeClient> client = clientOf(want.nodeId);
      LoadStageRequest r;
      {
        std::lock_guard lock(m_mutex);
        r.stageId = "stage-" + std::to_string(m_nextStage++);
      }
      r.model = m_modelIdentity;
      r.placement = want;
      r.contextLength = m_options.contextLength;
      r.maxSequences = m_options.maxSequences;
      r.maxBatch = m_options.maxBatch;
      WeightsProgress onBytes = [&](uint64_t sent, uint64_t total) {
        dp.bytesSent = sent;
        dp.bytesTotal = total;
        if (progress) progress(dp);
      };
      std::shared_ptr<RemoteStage> stage;
      try {
        stage = RemoteStage::deploy(client, m_model->file(), r, onBytes, m_options.loadTimeout);
      } catch (const TransportError& e) {
        throw StageFailure{want.nodeId, e.what()};
      }
      {
        std::lock_guard lock(m_mutex);
        const auto it = m_members.find(want.nodeId);
        stage->setDecodeAhead(it != m_members.end() &&
                              it->second.info.hasFeature(kFeatureDecodeAhead));
        stage->setSegmentSample(it != m_members.end() &&
                                it->second.info.hasFeature(kFeatureSegmentSample));
        stage->setDecodeRing(it != m_members.end() &&
                             it->second.info.hasFeature(kFeatureDecodeRing));
      }
      const LoadStageResult& loaded = stage->loaded();
      log("stage " + r.stageId + " layers [" + std::to_string(want.firstLayer) + ", " +
          std::to_string(want.lastLayer) + ") on " + dp.nodeName + "/" + want.deviceId + ": " +
          loaded.source + " in " + std::to_string(static_cast<int64_t>(loaded.loadMs)) + " ms" +
          (loaded.streamedBytes ? ", " + std::to_string(loaded.streamedBytes) + " bytes streamed"
                                : std::string()));
      after.push_back(std::move(stage));
    }
    dp.done = true;
    if (progress) progress(dp);
  }
  return after;
}

void Coordinator::linkHops(size_t replica) {
  LiveStages stages;
  std::vector<std::string> addresses;
  {
    std::lock_guard lock(m_mutex);
    stages = m_replicas.at(replica)->stages;
    for (const auto& s : stages) {
      const auto it = m_members.find(s->placement().nodeId);
      addresses.push_back(it == m_members.end() ? std::string() : it->second.address);
    }
  }
  std::vector<PipelineHop> hops;
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    RemoteStage& from = *stages[i];
    RemoteStage& to = *stages[i + 1];
    PipelineHop hop;
    hop.fromNode = nodeName(from.placement().nodeId);
    hop.toNode = nodeName(to.placement().nodeId);
    if (!m_options.directForwarding) {
      hop.note = "direct forwarding off";
    } else {
      try {
        const std::string route = to.client()->linkAccept(to.stageId(), from.placement().nodeId);
        hop.rttS = from.client()->linkConnect(from.stageId(), addresses[i + 1],
                                              to.placement().nodeId, route);
        hop.direct = true;
      } catch (const std::exception& e) {
        // The nodes cannot reach each other (or one is older, or gone: generation finds out):
        // this hop is relayed.
        hop.note = e.what();
        log("stage " + from.stageId() + " -> " + to.stageId() + " relayed: " + e.what());
      }
    }
    hops.push_back(std::move(hop));
  }
  // The ring: the head's node linked back to the first node, where every hop is direct.
  PipelineHop ring;
  const bool allDirect =
      std::all_of(hops.begin(), hops.end(), [](const PipelineHop& h) { return h.direct; });
  if (stages.size() > 1 && allDirect) {
    RemoteStage& head = *stages.back();
    RemoteStage& first = *stages.front();
    ring.fromNode = nodeName(head.placement().nodeId);
    ring.toNode = nodeName(first.placement().nodeId);
    if (!m_options.decodeRing) {
      ring.note = "ring off";
    } else if (!head.decodeRing() || !first.decodeRing()) {
      ring.note = "a node without the ring (an older shoal-node)";
    } else {
      try {
        const std::string route =
            first.client()->linkAccept(first.stageId(), head.placement().nodeId);
        ring.rttS = head.client()->linkConnect(head.stageId(), addresses.front(),
                                               first.placement().nodeId, route);
        ring.direct = true;
      } catch (const std::exception& e) {
        // Decoding goes token by token through the coordinator instead.
        ring.note = e.what();
        log("ring " + head.stageId() + " -> " + first.stageId() + " not linked: " + e.what());
      }
    }
  }
  {
    std::lock_guard lock(m_mutex);
    // Two stages on one node link it to itself: that round trip says nothing of a pair.
    auto record = [&](const RemoteStage& a, const RemoteStage& b, double rttS) {
      const std::string& x = a.placement().nodeId;
      const std::string& y = b.placement().nodeId;
      if (rttS > 0 && x != y) m_pairRtts[nodePair(x, y)] = rttS;
    };
    for (size_t i = 0; i < hops.size(); ++i) record(*stages[i], *stages[i + 1], hops[i].rttS);
    if (ring.direct) record(*stages.back(), *stages.front(), ring.rttS);
    m_replicas.at(replica)->hops = std::move(hops);
    m_replicas.at(replica)->ring = std::move(ring);
  }
  refreshPrediction(replica);
}

void Coordinator::refreshPrediction(size_t replica) {
  std::vector<StagePlacement> placements = deployed(replica);
  if (placements.empty()) return;
  const plan::Pool p = pool();
  const plan::Plan deployedPlan = planOfStages(placements, p);
  const std::vector<plan::StageAssignment>& stages = deployedPlan.pipelines.front().stages;
  if (std::any_of(stages.begin(), stages.end(), [](const auto& s) { return s.device < 0; })) {
    return;  // a node left since: the plan's figure stays
  }
  plan::Request request;
  request.contextTokens = m_options.contextLength;
  request.sequences = m_options.maxSequences;
  const double x =
      plan::evaluatePipeline(p, plan::LinkTable(p), m_modelCost, request, stages).throughputTokS;
  std::lock_guard lock(m_mutex);
  if (replica < m_replicas.size() && !m_replicas[replica]->stages.empty()) {
    m_replicas[replica]->predictedTokensPerS = x;
  }
}

PipelineHop Coordinator::ring(size_t replica) const {
  std::lock_guard lock(m_mutex);
  if (replica >= m_replicas.size()) return {};
  return m_replicas[replica]->ring;
}

size_t Coordinator::replicaCount() const {
  std::lock_guard lock(m_mutex);
  return m_replicas.size();
}

std::vector<PipelineHop> Coordinator::hops(size_t replica) const {
  std::lock_guard lock(m_mutex);
  if (replica >= m_replicas.size()) return {};
  return m_replicas[replica]->hops;
}

std::vector<StagePlacement> Coordinator::deployed(size_t replica) const {
  std::lock_guard lock(m_mutex);
  std::vector<StagePlacement> out;
  if (replica >= m_replicas.size()) return out;
  for (const auto& s : m_replicas[replica]->stages) out.push_back(s->placement());
  return out;
}

double Coordinator::predictedTokensPerS() const {
  std::lock_guard lock(m_mutex);
  double sum = 0;
  for (const auto& r : m_replicas) sum += r->predictedTokensPerS;
  return sum;
}

double Coordinator::predictedTokensPerS(size_t replica) const {
  std::lock_guard lock(m_mutex);
  return replica < m_replicas.size() ? m_replicas[replica]->predictedTokensPerS : 0.0;
}

void Coordinator::recover(const StageFailure& failure, int32_t generated, size_t replica) {
  std::lock_guard recovering(m_recoverMutex);
  const auto t0 = Clock::now();
  RecoveryEvent event;
  event.replica = replica;
  event.failedNodeId = failure.nodeId;
  event.failedNodeName = nodeName(failure.nodeId);
  event.cause = failure.cause;
  event.generatedBefore = generated;
  log("node " + event.failedNodeName + " failed after " + std::to_string(generated) +
      " token(s): " + failure.cause + "; re-planning without it");
  removeNode(failure.nodeId);

  // The replica is rebuilt on its own surviving devices and the spare ones: the nodes of the
  // other replicas are serving their own generations.
  std::vector<std::string> othersNodes;
  LiveStages current;
  bool several = false;
  {
    std::lock_guard lock(m_mutex);
    several = m_replicas.size() > 1;
    for (size_t r = 0; r < m_replicas.size(); ++r) {
      if (r == replica) continue;
      for (const auto& s : m_replicas[r]->stages) othersNodes.push_back(s->placement().nodeId);
    }
    current = m_replicas.at(replica)->stages;
  }
  auto retire = [&](const std::string& why) {
    {
      std::lock_guard lock(m_mutex);
      Replica& r = *m_replicas.at(replica);
      r.stages.clear();
      r.hops.clear();
      r.ring = {};
      r.predictedTokensPerS = 0;
      r.retired = true;
    }
    log("replica " + std::to_string(replica + 1) + " retired: " + why);
    return Error(why);
  };
  const plan::Pool p = poolWithout(othersNodes);
  const std::string lost = "node " + event.failedNodeName + " failed and ";
  if (p.devices.empty()) {
    throw retire(lost + (several ? "no spare node is left for its replica" : "no node is left"));
  }
  plan::Request request;
  request.contextTokens = m_options.contextLength;
  request.sequences = m_options.maxSequences;
  std::vector<StagePlacement> placements;
  for (const auto& s : current) placements.push_back(s->placement());
  const plan::Plan previous = planOfStages(placements, p);
  const plan::Replan next = plan::replan(previous, p, m_modelCost, request, singleChatOptions());
  if (!next.plan.feasible) {
    throw retire(lost + (several ? "its replica's nodes and the spare ones" : "the rest") +
                 " cannot hold the model: " + next.plan.infeasibleReason);
  }
  // replan() counts as moved every layer new to a device; what a node must really be sent
  // excludes the shards it cached in earlier runs and the stage it holds now. A layout of those
  // within 5% of the re-plan's speed streams nothing (a spare that once held the lost node's
  // layers takes them back from its cache).
  const plan::Plan chosen =
      preferCachedShards(next.plan, p, m_modelCost, request, holdings(), m_modelIdentity.sha256);
  bool unloadedAny = false;
  LiveStages loaded;
  try {
    loaded = loadStages(current, pipelineStages(chosen), {}, unloadedAny);
  } catch (...) {
    // The replica lost the stages unloaded; the next recovery plans it from nothing.
    if (unloadedAny) {
      std::lock_guard lock(m_mutex);
      m_replicas.at(replica)->stages.clear();
      m_replicas.at(replica)->predictedTokensPerS = 0;
    }
    throw;
  }
  {
    std::lock_guard lock(m_mutex);
    m_replicas.at(replica)->stages = std::move(loaded);
    m_replicas.at(replica)->predictedTokensPerS = chosen.pipelines.front().throughputTokS;
  }
  linkHops(replica);
  event.movedBytes = plan::movedWeightBytes(previous, chosen, m_modelCost);
  event.seconds = secondsSince(t0);
  log("recovered in " + std::to_string(event.seconds) + " s (" +
      std::to_string(static_cast<int64_t>(event.movedBytes)) +
      " weight bytes to load by the new plan)");
  std::lock_guard lock(m_mutex);
  m_recoveries.push_back(std::move(event));
}

double Coordinator::predictedTtftS(int promptTokens) const {
  const std::vector<StagePlacement> stages = deployed();
  if (stages.empty()) return 0;
  const plan::Pool p = pool();
  const plan::Plan deployedPlan = planOfStages(stages, p);
  for (const plan::StageAssignment& s : deployedPlan.pipelines.front().stages) {
    if (s.device < 0) return 0;  // a node left since: no figure
  }
  return plan::prefillTimeS(p, plan::LinkTable(p), m_modelCost,
                            deployedPlan.pipelines.front().stages, promptTokens,
                            m_options.maxBatch);
}

int Coordinator::routeRequest(const std::vector<ReplicaLoad>& loads) const {
  std::vector<std::vector<StagePlacement>> placements;
  {
    std::lock_guard lock(m_mutex);
    for (const auto& r : m_replicas) {
      placements.emplace_back();
      for (const auto& s : r->stages) placements.back().push_back(s->placement());
    }
  }
  const plan::Pool p = pool();
  if (p.devices.empty()) return -1;
  const plan::LinkTable links(p);
  plan::Request request;
  request.contextTokens = m_options.contextLength;
  request.sequences = m_options.maxSequences;
  std::vector<std::vector<plan::RoutableStage>> replicas(placements.size());
  for (size_t r = 0; r < placements.size(); ++r) {
    if (placements[r].empty()) continue;  // retired: malformed, never chosen
    const plan::Plan deployedPlan = planOfStages(placements[r], p);
    const std::vector<plan::StageAssignment>& stages = deployedPlan.pipelines.front().stages;
    if (std::any_of(stages.begin(), stages.end(), [](const auto& s) { return s.device < 0; })) {
      continue;  // a node left since (its recovery is under way)
    }
    const plan::PipelineMetrics planned =
        plan::evaluatePipeline(p, links, m_modelCost, request, stages);
    const ReplicaLoad load = r < loads.size() ? loads[r] : ReplicaLoad{};
    // What was measured replaces the plan's figure: the stage times are scaled by the ratio of
    // the measured time per token to the planned latency (hops and return included), so a
    // replica slower than planned (a busy node, a slow link) is seen as slower.
    const double scale = load.measuredSecondsPerToken > 0 && planned.latencyS > 0
                             ? load.measuredSecondsPerToken / planned.latencyS
                             : 1.0;
    for (size_t i = 0; i < stages.size(); ++i) {
      plan::RoutableStage s;
      s.device = stages[i].device;
      s.firstLayer = stages[i].firstLayer;
      s.lastLayer = stages[i].lastLayer;
      s.secondsPerToken = planned.stageS[i] * scale;
      s.queueDepth = load.sequences;
      s.kvSlots = std::max(1, m_options.maxSequences);
      replicas[r].push_back(s);
    }
  }
  return plan::chooseReplica(p, m_modelCost, replicas);
}

std::vector<RecoveryEvent> Coordinator::recoveries() const {
  std::lock_guard lock(m_mutex);
  return m_recoveries;
}

void Coordinator::rebuildChain(size_t replica) {
  LiveStages stages;
  std::vector<PipelineHop> hops;
  bool ring = false;
  Replica* r = nullptr;
  {
    std::lock_guard lock(m_mutex);
    if (replica < m_replicas.size()) {
      r = m_replicas[replica].get();
      stages = r->stages;
      hops = r->hops;
      ring = r->ring.direct;
    }
  }
  if (stages.empty()) throw Error("no pipeline deployed (deploy a plan first)");
  // Consecutive stages joined by direct hops form one group; a relayed hop starts a new one.
  std::vector<std::shared_ptr<LinkedStages>> groups;
  std::vector<std::shared_ptr<RemoteStage>> parts;
  for (size_t i = 0; i < stages.size(); ++i) {
    parts.push_back(stages[i]);
    const bool direct = i < hops.size() && hops[i].direct;
    if (!direct) groups.push_back(std::make_shared<LinkedStages>(std::exchange(parts, {})));
  }
  // One group of every stage (all hops direct) decodes ahead round its ring where it is linked.
  if (groups.size() == 1) groups.front()->setRing(ring);
  std::vector<std::shared_ptr<runtime::Stage>> links(groups.begin(), groups.end());
  // Replaced in place: the session or scheduler keeps a reference to the chain.
  if (r->chain) {
    *r->chain = runtime::Chain(std::move(links));
  } else {
    r->chain = std::make_unique<runtime::Chain>(std::move(links));
  }
  r->chainStages = std::move(groups);
}

void Coordinator::resetChains() {
  for (const auto& r : m_replicas) {
    r->chain.reset();
    r->chainStages.clear();
  }
}

std::string Coordinator::failedNodeOf(size_t replica, size_t chainStage) const {
  const LinkedStages& group = *m_replicas.at(replica)->chainStages.at(chainStage);
  return group.parts().at(group.failedPart())->placement().nodeId;
}

bool Coordinator::repairChain(size_t replica, const std::exception& error, size_t failedStage,
                              int32_t generated, int32_t slots) {
  Replica& r = *m_replicas.at(replica);
  if (dynamic_cast<const LinkFailure*>(&error)) {
    // Direct forwarding broke (not a node: a node that died throws TransportError first):
    // relay every hop until the next deploy links them again, and replay.
    bool anyDirect = false;
    {
      std::lock_guard lock(m_mutex);
      for (PipelineHop& h : r.hops) {
        if (!h.direct) continue;
        anyDirect = true;
        h.direct = false;
        h.note = std::string("a link failed: ") + error.what();
      }
      if (r.ring.direct) {
        r.ring.direct = false;
        r.ring.note = std::string("a link failed: ") + error.what();
      }
    }
    if (!anyDirect) return false;
    log(std::string("direct forwarding failed (") + error.what() +
        "): relaying through the coordinator");
    rebuildChain(replica);
    for (int32_t s = 0; s < slots; ++s) r.chain->truncate(s, 0);
    return true;
  }
  // A node that answers with an error is not failing: that error reaches the caller.
  if (!dynamic_cast<const TransportError*>(&error) || failedStage >= r.chainStages.size()) {
    return false;
  }
  StageFailure failure{failedNodeOf(replica, failedStage), error.what()};
  for (;;) {
    try {
      recover(failure, generated, replica);
      rebuildChain(replica);
      // Stages the new plan kept still hold the sequences; they are replayed from 0.
      for (int32_t s = 0; s < slots; ++s) r.chain->truncate(s, 0);
      return true;
    } catch (const StageFailure& again) {
      failure = again;  // a node failed while loading the new plan: drop it too
    } catch (const TransportError& e) {
      failure = {failedNodeOf(replica, r.chain->failedStage()), e.what()};
    }
  }
}

bool Coordinator::recoverStage(const std::exception& error, size_t failedStage) {
  // The session's cache holds the prompt and the reply so far when a stage fails.
  const auto generated =
      static_cast<int32_t>(m_session->cachedTokens().size() -
                           std::min(m_promptTokens, m_session->cachedTokens().size()));
  return repairChain(0, error, failedStage, generated, 1);
}

std::vector<Coordinator::PoolReply> Coordinator::generateConcurrently(
    const std::vector<PoolRequest>& requests) {
  std::lock_guard run(m_runMutex);
  if (!m_model) throw Error("no model set (setModel)");
  if (m_replicas.empty()) throw Error("no pipeline deployed (deploy a plan first)");
  Replica& first = *m_replicas.front();
  if (!first.chain) rebuildChain(0);
  // The scheduler uses the slots as it sees fit: the session's idea of slot 0 is stale after it.
  m_session.reset();
  std::vector<PoolReply> replies(requests.size());
  std::vector<int32_t> generated(requests.size(), 0);
  runtime::SchedulerOptions o;
  o.recovery = [this, &generated](const std::exception& e, size_t failedStage) {
    // The event counts the reply furthest along (in streamed pieces, about one per token).
    const int32_t most = *std::max_element(generated.begin(), generated.end());
    return repairChain(0, e, failedStage, most, m_options.maxSequences);
  };
  try {
    runtime::Scheduler scheduler(*first.chain, m_model->tokenizer(), std::move(o));
    for (size_t i = 0; i < requests.size(); ++i) {
      runtime::Scheduler::Request r;
      r.prompt = requests[i].prompt;
      r.options = requests[i].options;
      r.onText = [&, i](std::string_view piece) {
        ++generated[i];
        return requests[i].onText ? requests[i].onText(piece) : true;
      };
      r.onFinish = [&replies, i](const runtime::GenerateResult& result, std::string_view error) {
        replies[i].result = result;
        replies[i].error = std::string(error);
      };
      scheduler.add(std::move(r));
    }
    scheduler.runUntilIdle();
  } catch (...) {
    resetChains();
    throw;
  }
  // A failed generation leaves its slot in an unknown state: the next run starts over.
  for (const PoolReply& r : replies) {
    if (!r.error.empty()) {
      resetChains();
      break;
    }
  }
  return replies;
}

void Coordinator::serve(const ServeBody& body) {
  std::lock_guard run(m_runMutex);
  if (!m_model) throw Error("no model set (setModel)");
  if (m_replicas.empty()) throw Error("no pipeline deployed (deploy a plan first)");
  m_session.reset();  // the schedulers use the slots as they see fit
  std::vector<ServedReplica> served;
  for (size_t r = 0; r < m_replicas.size(); ++r) {
    // A replica retired earlier has no stages: this throws, and a new deploy is needed.
    if (!m_replicas[r]->chain) rebuildChain(r);
    ServedReplica s;
    s.chain = m_replicas[r]->chain.get();
    s.options.recovery = [this, r](const std::exception& e, size_t failedStage) {
      return repairChain(r, e, failedStage, 0, m_options.maxSequences);
    };
    served.push_back(std::move(s));
  }
  try {
    body(served);
  } catch (...) {
    resetChains();
    throw;
  }
  // Clients left the slots in any state: the next generation starts over.
  resetChains();
}

void Coordinator::setDrafter(runtime::ModelDrafter* drafter) {
  std::lock_guard run(m_runMutex);
  m_drafter = drafter;
}

runtime::GenerateResult Coordinator::generate(const std::vector<model::TokenId>& prompt,
                                              const runtime::GenerateOptions& options,
                                              const runtime::Session::TextCallback& onText) {
  std::lock_guard run(m_runMutex);
  if (!m_model) throw Error("no model set (setModel)");
  if (m_replicas.empty()) throw Error("no pipeline deployed (deploy a plan first)");
  if (!m_replicas.front()->chain) rebuildChain(0);
  if (!m_session) {
    m_session =
        std::make_unique<runtime::Session>(*m_replicas.front()->chain, m_model->tokenizer(), 0,
                                           [this](const std::exception& e, size_t failedStage) {
                                             return recoverStage(e, failedStage);
                                           });
  }
  m_session->setDrafter(m_drafter);
  m_promptTokens = prompt.size();
  try {
    return m_session->generate(prompt, options, onText);
  } catch (...) {
    // The caches are in an unknown state (or the pipeline is gone): the next generation
    // starts over.
    m_session.reset();
    resetChains();
    throw;
  }
}

void Coordinator::dropUntrustedMembers() {
  if (!m_options.isTrusted) return;
  std::vector<std::string> ids;
  {
    std::lock_guard lock(m_mutex);
    ids = m_memberOrder;
  }
  for (const std::string& id : ids) {
    if (m_options.isTrusted(id)) continue;
    // Its stages fail at their next use; generation then recovers without it, as from a crash.
    log("node " + nodeName(id) + " (" + id + ") is no longer trusted: dropped from the pool");
    removeNode(id);
  }
}

PoolSnapshot Coordinator::pollSnapshot() {
  dropUntrustedMembers();
  std::vector<std::pair<std::shared_ptr<NodeClient>, NodeReport>> polls;
  SnapshotContext context;
  {
    std::lock_guard lock(m_mutex);
    for (const std::string& id : m_memberOrder) {
      const Member& m = m_members.at(id);
      NodeReport r;
      r.info = m.info;
      r.rttS = m.link.rttS;
      r.bandwidthBytesPerS = m.link.bandwidthBytesPerS;
      polls.emplace_back(m.client, std::move(r));
    }
    if (m_model) context.modelName = m_modelIdentity.name;
    context.modelLayers = m_modelCost.layers;
    // The diagram shows the first replica (the one a chat uses); the figure counts them all.
    for (const auto& r : m_replicas) context.predictedTokensPerS += r->predictedTokensPerS;
    if (!m_replicas.empty()) {
      for (const auto& s : m_replicas.front()->stages) context.stages.push_back(s->placement());
      for (const PipelineHop& h : m_replicas.front()->hops) {
        context.directHops.push_back(h.direct);
      }
    }
  }
  for (auto& [client, report] : polls) {
    try {
      report.devices = client->telemetry();
      report.rttS = client->ping();
      report.replied = true;
    } catch (const std::exception&) {
      report.replied = false;  // shown idle; generation notices a dead node on its own
    }
    std::lock_guard lock(m_mutex);
    if (const auto it = m_members.find(report.info.deviceId);
        it != m_members.end() && report.replied) {
      it->second.link.rttS = report.rttS;
    }
  }
  context.unixMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::vector<NodeReport> reports;
  for (auto& p : polls) reports.push_back(std::move(p.second));
  return buildSnapshot(context, reports);
}

void Coordinator::startTelemetry(std::function<void(const PoolSnapshot&)> onSnapshot,
                                 std::chrono::milliseconds interval) {
  stopTelemetry();
  {
    std::lock_guard lock(m_telemetryMutex);
    m_telemetryStop = false;
  }
  m_telemetryThread = std::thread([this, onSnapshot = std::move(onSnapshot), interval] {
    std::unique_lock lock(m_telemetryMutex);
    while (!m_telemetryStop) {
      lock.unlock();
      PoolSnapshot snap = pollSnapshot();
      if (onSnapshot) onSnapshot(snap);
      lock.lock();
      m_telemetryWake.wait_for(lock, interval, [this] { return m_telemetryStop; });
    }
  });
}

void Coordinator::stopTelemetry() {
  {
    std::lock_guard lock(m_telemetryMutex);
    m_telemetryStop = true;
  }
  m_telemetryWake.notify_all();
  if (m_telemetryThread.joinable()) m_telemetryThread.join();
}

}  // namespace shoal::lan
