// The coordinator's pure pieces: node_info validation, the planner's pool built from members
// and coordinator-link measurements, the pipeline chosen from a plan, re-planning after a node
// is lost, and telemetry aggregation into a PoolSnapshot.

#include <QtTest>

#include "engine/error.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/planner.h"
#include "engine/plan/replan.h"
#include "lan/pool/cached_layout.h"
#include "lan/pool/node_info.h"
#include "lan/pool/pool_builder.h"
#include "lan/pool/snapshot.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

NodeInfo node(const std::string& id, double memory, double bandwidth = 2e10) {
  NodeInfo n;
  n.name = "name-" + id;
  n.deviceId = id;
  NodeDevice d;
  d.id = "cpu0";
  d.backend = "cpu";
  d.name = "cpu";
  d.type = "cpu";
  d.memoryTotal = static_cast<uint64_t>(memory);
  d.memoryFree = static_cast<uint64_t>(memory);
  d.bandwidthBytesPerS = bandwidth;
  d.flopsPerS = 1e11;
  n.devices.push_back(d);
  return n;
}

plan::ModelCost modelCost() {
  plan::ModelCost m;
  m.layers = 30;
  m.layerWeightBytes = 2e6;
  m.layerFlopsPerToken = 4e6;
  m.kvBytesPerTokenPerLayer = 768;
  m.hiddenBytesPerToken = 576 * 4;
  m.embedBytes = 3e7;
  m.headBytes = 3e7;
  m.headFlopsPerToken = 5.6e7;
  return m;
}

plan::Request request() {
  plan::Request r;
  r.contextTokens = 512;
  r.sequences = 1;
  return r;
}

// Memory that holds about 40% of the whole model: three such nodes are needed.
double fortyPercent() { return 0.4 * plan::splitMemoryBytes(modelCost(), request()); }

plan::PlanOptions oneChat() {
  plan::PlanOptions o;
  o.maxPipelines = 1;
  return o;
}

void checkCoversModel(const std::vector<StagePlacement>& stages, int layers) {
  QVERIFY(!stages.empty());
  QVERIFY(stages.front().hasEmbedding);
  QVERIFY(stages.back().hasHead);
  int next = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    QCOMPARE(stages[i].firstLayer, next);
    QVERIFY(stages[i].lastLayer > stages[i].firstLayer);
    QCOMPARE(stages[i].hasEmbedding, i == 0);
    QCOMPARE(stages[i].hasHead, i + 1 == stages.size());
    next = stages[i].lastLayer;
  }
  QCOMPARE(next, layers);
}

}  // namespace

class TestPoolBuilder : public QObject {
  Q_OBJECT

 private slots:
  void nodeInfoRoundTripsThroughJson() {
    NodeInfo n = node("AAAA-BBBB", 1e9);
    n.models.push_back(NodeModel{"m.gguf", "abc123", 42});
    const NodeInfo back = parseNodeInfo(nodeInfoToJson(n));
    QCOMPARE(back.deviceId, n.deviceId);
    QCOMPARE(back.name, n.name);
    QCOMPARE(back.devices.size(), size_t(1));
    QCOMPARE(back.devices[0].memoryFree, n.devices[0].memoryFree);
    QCOMPARE(back.devices[0].bandwidthBytesPerS, 2e10);
    QVERIFY(back.hasModel("abc123"));
    QVERIFY(!back.hasModel("other"));
  }

  void nodeInfoWithNegativeMemoryIsRefusedNamingTheField() {
    nlohmann::json j = nodeInfoToJson(node("A", 1e9));
    j["devices"][0]["memory_total"] = -5;
    try {
      parseNodeInfo(j);
      QFAIL("accepted negative memory");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("devices[0].memory_total") != std::string::npos,
               e.what());
    }
  }

  void nodeInfoWithDuplicateDeviceIdsIsRefused() {
    NodeInfo n = node("A", 1e9);
    n.devices.push_back(n.devices[0]);
    QVERIFY_THROWS_EXCEPTION(Error, parseNodeInfo(nodeInfoToJson(n)));
  }

  void nodeInfoWithoutDeviceIdIsRefused() {
    nlohmann::json j = nodeInfoToJson(node("A", 1e9));
    j.erase("device_id");
    QVERIFY_THROWS_EXCEPTION(Error, parseNodeInfo(j));
  }

  void poolHasOneDevicePerNodeDeviceWithTheNodeAsItsNode() {
    const plan::Pool pool = buildPool({node("A", 1e9), node("B", 2e9)}, {});
    QCOMPARE(pool.devices.size(), size_t(2));
    QCOMPARE(pool.devices[0].id, planDeviceId("A", "cpu0"));
    QCOMPARE(pool.devices[0].node, std::string("A"));
    QCOMPARE(pool.devices[1].memoryBytes, 2e9);
    const auto [nodeId, deviceId] = splitPlanDeviceId(pool.devices[1].id);
    QCOMPARE(nodeId, std::string("B"));
    QCOMPARE(deviceId, std::string("cpu0"));
  }

  void pairLinkIsTheRelayedPathThroughTheCoordinator() {
    const plan::Pool pool =
        buildPool({node("A", 1e9), node("B", 1e9)},
                  {NodeLinkProfile{"A", 0.002, 1e8}, NodeLinkProfile{"B", 0.004, 5e7}});
    QCOMPARE(pool.links.size(), size_t(1));
    QCOMPARE(pool.links[0].link.latencyS, 0.003);  // 1 ms + 2 ms one way
    QCOMPARE(pool.links[0].link.bandwidthBytesPerS, 5e7);
  }

  // A round trip the two nodes measured on their own link (a coordinator on Wi-Fi makes the
  // relayed estimate far too slow for wired nodes) replaces the estimate, in either order.
  void pairLinkIsTheMeasuredRoundTripWhereTheNodesMeasuredOne() {
    const std::vector<NodeLinkProfile> links{NodeLinkProfile{"A", 0.004, 1e8},
                                             NodeLinkProfile{"B", 0.004, 1e8},
                                             NodeLinkProfile{"C", 0.004, 1e8}};
    const plan::Pool pool = buildPool({node("A", 1e9), node("B", 1e9), node("C", 1e9)}, links,
                                      {{nodePair("B", "A"), 0.0006}});
    QCOMPARE(pool.links.size(), size_t(3));
    for (const plan::NodeLink& l : pool.links) {
      const bool ab = nodePair(l.nodeA, l.nodeB) == nodePair("A", "B");
      QCOMPARE(l.link.latencyS, ab ? 0.0003 : 0.004);
    }
  }

  void unprofiledDevicesAndLinksGetFallbackFigures() {
    NodeInfo a = node("A", 1e9, 0);
    a.devices[0].flopsPerS = 0;
    const plan::Pool pool = buildPool({a, node("B", 1e9)}, {});
    QCOMPARE(pool.devices[0].bandwidthBytesPerS, kFallbackBandwidthBytesPerS);
    QCOMPARE(pool.devices[0].flopsPerS, kFallbackFlopsPerS);
    QCOMPARE(pool.links[0].link.latencyS, kFallbackRttS);
    QCOMPARE(pool.links[0].link.bandwidthBytesPerS, kFallbackLinkBandwidth);
    plan::validateInputs(pool, modelCost(), request());  // the planner accepts it
  }

  void sameNodeTwiceIsRefused() {
    QVERIFY_THROWS_EXCEPTION(Error, buildPool({node("A", 1e9), node("A", 1e9)}, {}));
  }

  void modelTooBigForOneNodeIsSplitOverThreeWithRoles() {
    const double m = fortyPercent();
    const plan::Pool pool = buildPool({node("A", m), node("B", m), node("C", m)}, {});
    const plan::Plan p = plan::plan(pool, modelCost(), request(), oneChat());
    QVERIFY(p.feasible);
    const std::vector<StagePlacement> stages = pipelineStages(p);
    QCOMPARE(stages.size(), size_t(3));
    checkCoversModel(stages, 30);
  }

  void infeasiblePlanIsAnErrorWithTheReason() {
    const plan::Pool pool = buildPool({node("A", 1e6)}, {});
    const plan::Plan p = plan::plan(pool, modelCost(), request(), oneChat());
    QVERIFY(!p.feasible);
    QVERIFY_THROWS_EXCEPTION(Error, pipelineStages(p));
  }

  void replanAfterLosingTheMiddleNodeCoversTheModelWithoutIt() {
    const double m = fortyPercent();
    std::vector<NodeInfo> nodes{node("A", m), node("B", m), node("C", m), node("D", m)};
    const plan::Pool pool = buildPool(nodes, {});
    const std::vector<StagePlacement> before =
        pipelineStages(plan::plan(pool, modelCost(), request(), oneChat()));
    QCOMPARE(before.size(), size_t(3));
    const std::string lost = before[1].nodeId;
    std::erase_if(nodes, [&](const NodeInfo& n) { return n.deviceId == lost; });
    const plan::Pool rest = buildPool(nodes, {});
    const plan::Replan r =
        plan::replan(planOfStages(before, rest), rest, modelCost(), request(), oneChat());
    QVERIFY(r.plan.feasible);
    const std::vector<StagePlacement> after = pipelineStages(r.plan);
    checkCoversModel(after, 30);
    for (const StagePlacement& s : after) QVERIFY(s.nodeId != lost);
    QVERIFY(r.movedBytes > 0);  // the lost layers have to be loaded somewhere
  }

  void cachedShardsRoundTripAndBadOnesAreRefused() {
    NodeInfo n = node("A", 1e9);
    n.shards.push_back(CachedShard{"abc", 0, 9});
    const NodeInfo back = parseNodeInfo(nodeInfoToJson(n));
    QCOMPARE(back.shards.size(), size_t(1));
    QCOMPARE(back.shards[0].model, std::string("abc"));
    QCOMPARE(back.shards[0].lastLayer, 9);
    nlohmann::json j = nodeInfoToJson(n);
    j["shards"][0]["last_layer"] = 0;  // an empty range
    QVERIFY_THROWS_EXCEPTION(Error, parseNodeInfo(j));
    j["shards"] = "x";
    QVERIFY_THROWS_EXCEPTION(Error, parseNodeInfo(j));
  }

  // Ranges the nodes cached in an earlier run are deployed again when that costs (almost) no
  // speed, so nothing is streamed; a node with the file streams nothing anyway; a cached layout
  // that is slower by more than the tolerance, or does not fit, is not used.
  void cachedRangesAreReusedWhenNearlyAsFast() {
    const double m = fortyPercent();
    std::vector<NodeInfo> nodes{node("A", m), node("B", m), node("C", m)};
    const plan::Pool pool = buildPool(nodes, {});
    const plan::Plan best = plan::plan(pool, modelCost(), request(), oneChat());
    QVERIFY(best.feasible);
    QVERIFY(streamedBytes(best, modelCost(), request(), nodes, "sha") > 0);

    // Last run put the same ranges on other nodes (each one node later, the last on the first
    // node's): they are cached there, so that layout streams nothing at the same speed.
    const std::vector<StagePlacement> planned = pipelineStages(best);
    QCOMPARE(planned.size(), size_t(3));
    auto nodeAfter = [&](const std::string& id) {
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].deviceId == id) return (i + 1) % nodes.size();
      }
      return size_t(0);
    };
    for (const StagePlacement& st : planned) {
      nodes[nodeAfter(st.nodeId)].shards.push_back(CachedShard{"sha", st.firstLayer, st.lastLayer});
    }
    nodes[2].shards.push_back(CachedShard{"other-model", 0, 30});
    const plan::Plan reuse = preferCachedShards(best, pool, modelCost(), request(), nodes, "sha");
    const std::vector<StagePlacement> stages = pipelineStages(reuse);
    checkCoversModel(stages, 30);
    for (size_t i = 0; i < stages.size(); ++i) {
      QCOMPARE(stages[i].firstLayer, planned[i].firstLayer);
      QCOMPARE(stages[i].nodeId, nodes[nodeAfter(planned[i].nodeId)].deviceId);
    }
    QCOMPARE(streamedBytes(reuse, modelCost(), request(), nodes, "sha"), 0.0);
    QVERIFY(reuse.throughputTokS >= 0.95 * best.throughputTokS);

    // A node with the model file streams nothing: the best plan stays as it is.
    std::vector<NodeInfo> withFile = nodes;
    for (NodeInfo& n : withFile) n.models.push_back(NodeModel{"m.gguf", "sha", 1});
    QCOMPARE(streamedBytes(best, modelCost(), request(), withFile, "sha"), 0.0);
    const plan::Plan same = preferCachedShards(best, pool, modelCost(), request(), withFile, "sha");
    QVERIFY(pipelineStages(same) == pipelineStages(best));

    // Too slow: the cached layout puts a stage on a node ten times slower.
    std::vector<NodeInfo> slow = nodes;
    slow[0] = node("A", m, 2e9);
    slow[0].shards = nodes[0].shards;
    QVERIFY(!slow[0].shards.empty());
    const plan::Pool slowPool = buildPool(slow, {});
    const plan::Plan slowBest = plan::plan(slowPool, modelCost(), request(), oneChat());
    const plan::Plan kept =
        preferCachedShards(slowBest, slowPool, modelCost(), request(), slow, "sha");
    QVERIFY(pipelineStages(kept) == pipelineStages(slowBest));

    // Does not fit: a cached range larger than a node's memory is never deployed.
    std::vector<NodeInfo> big = {node("A", m), node("B", m), node("C", m)};
    big[0].shards.push_back(CachedShard{"sha", 0, 25});
    big[1].shards.push_back(CachedShard{"sha", 25, 30});
    const plan::Plan noFit = preferCachedShards(best, pool, modelCost(), request(), big, "sha");
    QVERIFY(pipelineStages(noFit) == pipelineStages(best));
  }

  void planOfStagesReadsBackTheSameStages() {
    const double m = fortyPercent();
    const plan::Pool pool = buildPool({node("A", m), node("B", m), node("C", m)}, {});
    const std::vector<StagePlacement> stages =
        pipelineStages(plan::plan(pool, modelCost(), request(), oneChat()));
    QVERIFY(pipelineStages(planOfStages(stages, pool)) == stages);
  }

  void telemetryReplyWithNegativeBusyIsRefused() {
    nlohmann::json j = {{"op", "telemetry"},
                        {"devices", {{{"deviceId", "cpu0"}, {"busyFraction", -1}}}}};
    QVERIFY_THROWS_EXCEPTION(Error, parseTelemetryReply(j));
    QVERIFY_THROWS_EXCEPTION(Error, parseTelemetryReply({{"op", "telemetry"}}));
  }

  void snapshotGivesDevicesTheirLayersAndLinksTheRelayedRtt() {
    SnapshotContext ctx;
    ctx.modelName = "m.gguf";
    ctx.modelLayers = 30;
    ctx.stages = {StagePlacement{"A", "cpu0", 0, 10, true, false},
                  StagePlacement{"B", "cpu0", 10, 30, false, true}};
    ctx.directHops = {true};
    std::vector<NodeReport> reports(3);
    const char* ids[] = {"A", "B", "C"};
    for (int i = 0; i < 3; ++i) {
      reports[i].info = node(ids[i], 1e9);
      reports[i].replied = true;
      reports[i].rttS = 0.001 * (i + 1);
      DeviceTelemetry t;
      t.deviceId = "cpu0";
      t.nodeId = "spoofed";  // the coordinator's verified id wins
      t.busyFraction = 0.5;
      reports[i].devices.push_back(t);
    }
    const PoolSnapshot s = buildSnapshot(ctx, reports);
    QCOMPARE(s.devices.size(), size_t(3));
    QCOMPARE(s.devices[0].nodeId, std::string("A"));
    QCOMPARE(s.devices[0].nodeName, std::string("name-A"));
    QCOMPARE(s.devices[0].firstLayer, 0);
    QCOMPARE(s.devices[1].lastLayer, 30);
    QCOMPARE(s.devices[2].firstLayer, -1);  // C holds nothing
    QCOMPARE(s.links.size(), size_t(1));
    QCOMPARE(s.links[0].fromNodeId, std::string("A"));
    QCOMPARE(s.links[0].toNodeId, std::string("B"));
    QVERIFY(std::abs(s.links[0].rttMs - 3.0) < 1e-9);
    QVERIFY(s.links[0].direct);
    QCOMPARE(s.modelLayers, 30);
  }

  void snapshotShowsANodeThatDidNotReplyAsIdle() {
    std::vector<NodeReport> reports(1);
    reports[0].info = node("A", 1e9);
    reports[0].replied = false;
    const PoolSnapshot s = buildSnapshot(SnapshotContext{}, reports);
    QCOMPARE(s.devices.size(), size_t(1));
    QCOMPARE(s.devices[0].busyFraction, 0.0);
    QCOMPARE(s.devices[0].memoryTotal, uint64_t(1e9));
    QCOMPARE(s.devices[0].nodeId, std::string("A"));
  }
};

QTEST_GUILESS_MAIN(TestPoolBuilder)
#include "test_pool_builder.moc"
