// Incremental re-planning: when a device leaves, the pipelines it was not part of stay as they
// were; when one joins, the plan changes only as much as the throughput warrants; the bytes to
// move are reported.

#include <QtTest>
#include <algorithm>

#include "engine/plan/cost_model.h"
#include "engine/plan/planner.h"
#include "engine/plan/replan.h"
#include "plan_test_pools.h"

using namespace shoal::plan;

namespace {

ModelCost model() {
  ModelCost m;
  m.layers = 32;
  m.layerWeightBytes = 1e8;
  m.layerFlopsPerToken = 2e8;
  m.kvBytesPerTokenPerLayer = 1024;
  m.hiddenBytesPerToken = 8192;
  m.embedBytes = 1e8;
  m.headBytes = 1e8;
  m.headFlopsPerToken = 2e8;
  return m;
}

// Three machines with two 2 GB GPUs each: no GPU holds the model alone (3.4 GB + KV), a pair
// does, so the plan is three two-stage pipelines, one per machine.
Pool threeMachines() {
  Pool p;
  for (int m = 0; m < 3; ++m) {
    for (int g = 0; g < 2; ++g) {
      std::string node = "m";
      node += std::to_string(m);
      std::string id = node;
      id += "g";
      id += std::to_string(g);
      p.devices.push_back(Device{id, node, 2e9, 8e11 + 1e11 * m, 1e14});
    }
  }
  p.defaultLink = Link{5e-4, 1.25e8};
  return p;
}

Pool without(Pool p, const std::string& id) {
  p.devices.erase(std::find_if(p.devices.begin(), p.devices.end(),
                               [&](const Device& d) { return d.id == id; }));
  return p;
}

const Pipeline* pipelineWith(const Plan& plan, const std::string& id) {
  for (const Pipeline& p : plan.pipelines) {
    for (const StageAssignment& s : p.stages) {
      if (s.deviceId == id) return &p;
    }
  }
  return nullptr;
}

bool sameStages(const Pipeline& a, const Pipeline& b) {
  if (a.stages.size() != b.stages.size()) return false;
  for (size_t i = 0; i < a.stages.size(); ++i) {
    if (a.stages[i].deviceId != b.stages[i].deviceId ||
        a.stages[i].firstLayer != b.stages[i].firstLayer ||
        a.stages[i].lastLayer != b.stages[i].lastLayer) {
      return false;
    }
  }
  return true;
}

}  // namespace

class PlanReplanTest : public QObject {
  Q_OBJECT

 private slots:
  void keepsUnaffectedStagesWhenADeviceLeaves() {
    const Request req{2048, 2};
    const Pool before = threeMachines();
    const Plan old = plan(before, model(), req);
    QCOMPARE(old.pipelines.size(), size_t{3});
    const Pool after = without(before, "m1g0");
    const Replan r = replan(old, after, model(), req);
    QVERIFY(r.plan.feasible);
    QVERIFY(planViolations(after, model(), req, r.plan).empty());
    for (const char* id : {"m0g0", "m0g1", "m2g0", "m2g1"}) {
      const Pipeline* was = pipelineWith(old, id);
      const Pipeline* now = pipelineWith(r.plan, id);
      QVERIFY(was && now);
      QVERIFY2(sameStages(*was, *now), id);
    }
    // Nothing had to move: the survivors kept their layers, m1g1 alone cannot hold the model.
    QCOMPARE(r.movedBytes, 0.0);
    QCOMPARE(r.plan.unusedDevices, std::vector<std::string>{"m1g1"});
  }

  void reportsTheBytesToMove() {
    // Moving from one device holding [0,32) to two devices [0,16) + [16,32): the second device
    // loads 16 layers and the head; the first keeps its layers and embedding.
    Plan before, after;
    Pipeline one;
    one.stages = {StageAssignment{0, "a", 0, 32, 0}};
    before.pipelines.push_back(one);
    Pipeline two;
    two.stages = {StageAssignment{0, "a", 0, 16, 0}, StageAssignment{1, "b", 16, 32, 0}};
    after.pipelines.push_back(two);
    QCOMPARE(movedWeightBytes(before, after, model()), 16 * 1e8 + 1e8);
    QCOMPARE(movedWeightBytes(after, after, model()), 0.0);
  }

  void bytesToMoveCountEachLayersOwnWeights() {
    // Layers of 1, 2, 3 and 4 × 100 MB: going from a [0, 4) to a [0, 1) + b [1, 4), b loads
    // layers 1-3 (900 MB) and the head; a then moving to [0, 3) loads layers 1 and 2 (500 MB).
    ModelCost m = model();
    m.layers = 4;
    m.perLayer = {
        {1e8, 1e8, 2e8, 0, 0}, {2e8, 2e8, 4e8, 0, 0}, {3e8, 3e8, 6e8, 0, 0}, {4e8, 4e8, 8e8, 0, 0}};
    Plan whole, split, shifted;
    whole.pipelines.push_back(Pipeline{{StageAssignment{0, "a", 0, 4, 0}}, 0, 0});
    split.pipelines.push_back(
        Pipeline{{StageAssignment{0, "a", 0, 1, 0}, StageAssignment{1, "b", 1, 4, 0}}, 0, 0});
    shifted.pipelines.push_back(
        Pipeline{{StageAssignment{0, "a", 0, 3, 0}, StageAssignment{1, "b", 3, 4, 0}}, 0, 0});
    QCOMPARE(movedWeightBytes(whole, split, m), 9e8 + 1e8);
    QCOMPARE(movedWeightBytes(split, shifted, m), 5e8);
    // A device that held a middle range and now holds a wider one loads both sides of it.
    Plan middle, wider;
    middle.pipelines.push_back(
        Pipeline{{StageAssignment{0, "a", 0, 1, 0}, StageAssignment{1, "b", 1, 2, 0},
                  StageAssignment{2, "c", 2, 4, 0}},
                 0,
                 0});
    wider.pipelines.push_back(Pipeline{{StageAssignment{1, "b", 0, 4, 0}}, 0, 0});
    QCOMPARE(movedWeightBytes(middle, wider, m), 1e8 + 3e8 + 4e8 + 1e8 + 1e8);
  }

  void prefersFewerMovedBytesWithinFivePercent() {
    // A new GPU joins a pool that already runs well: a fresh plan could reshuffle everything for
    // a sliver of throughput; re-planning must keep the running pipelines when it costs < 5%.
    const Request req{2048, 2};
    const Pool before = threeMachines();
    const Plan old = plan(before, model(), req);
    Pool after = before;
    after.devices.push_back(Device{"m3g0", "m3", 2e9, 8.5e11, 1e14});
    const Plan fresh = plan(after, model(), req);
    const Replan r = replan(old, after, model(), req);
    QVERIFY(r.plan.feasible);
    QVERIFY(r.plan.throughputTokS >= 0.95 * fresh.throughputTokS);
    QVERIFY(r.movedBytes <= movedWeightBytes(old, fresh, model()));
    for (const Pipeline& p : old.pipelines) {
      const Pipeline* now = pipelineWith(r.plan, p.stages.front().deviceId);
      QVERIFY(now && sameStages(p, *now));
    }
  }

  void aJoiningDeviceNeverLowersThroughput() {
    // Random pools of 5-30 devices (the large-pool search included): re-planning after a join
    // keeps at least the running plan's X.
    std::mt19937_64 rng(7);
    for (int t = 0; t < 60; ++t) {
      const int devices = std::uniform_int_distribution<int>(5, 30)(rng);
      plan_test::Instance in =
          plan_test::randomInstance(rng, devices, std::uniform_int_distribution<int>(4, 48)(rng));
      in.pool.defaultLink = Link{plan_test::uniform(rng, 1e-4, 5e-3), 1e8};
      const Plan running = plan(in.pool, in.model, in.request);
      in.pool.devices.push_back(plan_test::randomDevice(rng, in.model, devices, 4));
      const Replan r = replan(running, in.pool, in.model, in.request);
      QVERIFY(planViolations(in.pool, in.model, in.request, r.plan).empty());
      QVERIFY2(r.plan.throughputTokS >= running.throughputTokS * (1 - 1e-9),
               qPrintable(QString("pool %1: %2 -> %3")
                              .arg(t)
                              .arg(running.throughputTokS)
                              .arg(r.plan.throughputTokS)));
    }
  }

  void usesAJoiningDeviceThatRaisesThroughputALot() {
    // A much faster device joins: alone it beats the old pair by far, so it must be used even
    // though that moves a whole model's weights.
    const Request req{2048, 1};
    Pool before;
    before.devices = {Device{"a", "n", 2e9, 2e11, 1e14}, Device{"b", "n", 2e9, 2e11, 1e14}};
    const Plan old = plan(before, model(), req);
    QCOMPARE(old.pipelines.size(), size_t{1});
    Pool after = before;
    after.devices.push_back(Device{"fast", "n", 80e9, 3e12, 1e15});
    const Replan r = replan(old, after, model(), req);
    const Plan fresh = plan(after, model(), req);
    QVERIFY(r.plan.throughputTokS >= 0.95 * fresh.throughputTokS);
    QVERIFY(pipelineWith(r.plan, "fast") != nullptr);
    QVERIFY(r.movedBytes > 0);
  }
};

QTEST_GUILESS_MAIN(PlanReplanTest)
#include "test_plan_replan.moc"
