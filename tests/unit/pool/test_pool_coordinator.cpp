// The coordinator against in-process fake nodes that run real CPU stages of the default model:
// a pooled greedy reply equals the single-chain one, a node that dies mid-reply is replaced
// without changing the reply, weights are streamed to a node without the model file, and
// telemetry covers every node.

#include <QtTest>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "engine/error.h"
#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/pool/coordinator.h"
#include "lan/pool/sha256.h"
#include "tests/unit/pool/fake_node.h"

using namespace shoal;
using namespace shoal::lan;
using shoal::lan::testing::FakeConnection;
using shoal::lan::testing::FakeNode;
using shoal::lan::testing::FakeNodeConfig;

namespace {

constexpr int32_t kContext = 512;
constexpr int32_t kReplyTokens = 40;
const char* kPrompt = "The three primary colors are";

std::string modelPath() {
  const std::string p = std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(p)) return p;
  return model::defaultModelPath();
}

// A set of fake nodes reachable by address "fake-N:7000".
struct FakePool {
  std::vector<std::unique_ptr<FakeNode>> nodes;
  std::map<std::string, FakeNode*> byAddress;

  std::string add(FakeNodeConfig config, const model::Model& model, const std::string& sha,
                  runtime::Backend& backend) {
    const std::string address = "fake-" + std::to_string(nodes.size()) + ":7000";
    nodes.push_back(std::make_unique<FakeNode>(std::move(config), model, sha, backend));
    byAddress[address] = nodes.back().get();
    return address;
  }
  FakeNode& byId(const std::string& id) {
    for (auto& n : nodes) {
      if (n->info().deviceId == id) return *n;
    }
    throw Error("no fake node " + id);
  }
  Connector connector() {
    return [this](const std::string& address) -> std::unique_ptr<Connection> {
      const auto it = byAddress.find(address);
      if (it == byAddress.end()) {
        throw TransportError(TransportError::Kind::Io, address + ": connection refused");
      }
      return std::make_unique<FakeConnection>(*it->second, address);
    };
  }
};

}  // namespace

class TestPoolCoordinator : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<runtime::Backend> m_backend;
  std::string m_sha;
  uint64_t m_fortyPercent = 0;  // memory holding ~40% of the model: three nodes are needed
  std::vector<model::TokenId> m_prompt;
  runtime::GenerateResult m_reference;  // single chain, greedy

  FakeNodeConfig config(int i, uint64_t memory) {
    FakeNodeConfig c;
    c.name = "node" + std::to_string(i);
    c.deviceId = "NODE" + std::to_string(i) + "-AAAAAAA";
    c.memoryBytes = memory;
    return c;
  }

  CoordinatorOptions options() {
    CoordinatorOptions o;
    o.contextLength = kContext;
    o.pingSamples = 3;
    o.bandwidthProbeBytes = 4096;
    return o;
  }

  runtime::GenerateOptions greedy(int32_t tokens = kReplyTokens) {
    runtime::GenerateOptions g;
    g.maxTokens = tokens;
    g.sampler.temperature = 0;
    g.ignoreEndOfGeneration = true;
    return g;
  }

  // One CPU stage with the whole model, taking at most maxBatch rows per batch.
  runtime::Chain localChain(int32_t maxBatch = 512) {
    runtime::StageSpec spec;
    spec.lastLayer = m_model->config().nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = kContext;
    spec.maxBatch = maxBatch;
    runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(m_backend->createStage("cpu0", src, spec));
    return runtime::Chain(std::move(stages));
  }

  // A greedy request of `tokens` tokens per prompt, and what each generates alone on one local
  // chain.
  void greedyRequests(std::span<const char* const> prompts, int32_t tokens,
                      std::vector<Coordinator::PoolRequest>& requests,
                      std::vector<runtime::GenerateResult>& want) {
    for (const char* p : prompts) {
      Coordinator::PoolRequest r;
      r.prompt = m_model->tokenizer().encode(p, true, false);
      r.options = greedy(tokens);
      runtime::Chain chain = localChain();
      runtime::Session session(chain, m_model->tokenizer());
      want.push_back(session.generate(r.prompt, r.options));
      requests.push_back(std::move(r));
    }
  }

  // Adds the nodes, profiles, plans and deploys; returns the coordinator.
  std::unique_ptr<Coordinator> deployed(FakePool& fakes, const std::vector<std::string>& addrs,
                                        CoordinatorOptions o = {}) {
    if (o.contextLength != kContext) o = options();
    auto c = std::make_unique<Coordinator>(fakes.connector(), o);
    for (const std::string& a : addrs) c->addNode(a);
    c->profileLinks();
    c->setModel(modelPath());
    c->deploy(c->makePlan());
    return c;
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(modelPath())) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(modelPath());
    kernels::BackendOptions bo;
    bo.cpuThreads = 1;
    m_backend = kernels::createBackend("cpu", bo);
    m_sha = sha256FileHex(modelPath());
    const plan::ModelCost cost = plan::modelCostFromGguf(m_model->file(), kContext);
    plan::Request r;
    r.contextTokens = kContext;
    m_fortyPercent = static_cast<uint64_t>(0.4 * plan::splitMemoryBytes(cost, r));
    m_prompt = m_model->tokenizer().encode(kPrompt, true, false);

    runtime::Chain chain = localChain();
    runtime::Session session(chain, m_model->tokenizer());
    m_reference = session.generate(m_prompt, greedy());
    QCOMPARE(m_reference.tokens.size(), size_t(kReplyTokens));
  }

  void pooledGreedyReplyEqualsTheSingleChainReply() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    QCOMPARE(c->deployed().size(), size_t(3));
    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(r.text, m_reference.text);
    QCOMPARE(r.finish, runtime::FinishReason::Length);
    QVERIFY(c->recoveries().empty());
  }

  void middleNodeDyingMidReplyLeavesTheGreedyReplyUnchanged() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 4; ++i) {
      FakeNodeConfig cfg = config(i, m_fortyPercent);
      cfg.hasModelFile = i != 3;  // whoever replaces the dead node may have to be streamed to
      addrs.push_back(fakes.add(cfg, *m_model, m_sha, *m_backend));
    }
    auto c = deployed(fakes, addrs);
    const std::vector<StagePlacement> before = c->deployed();
    QCOMPARE(before.size(), size_t(3));
    FakeNode& middle = fakes.byId(before[1].nodeId);
    // Its 1st forward is the prompt, then one per token: it dies when token 16 is computed.
    const int dieAt = 16;
    middle.dieAfterForwards(dieAt);

    std::string streamed;
    const runtime::GenerateResult r = c->generate(m_prompt, greedy(), [&](std::string_view piece) {
      streamed += piece;
      return true;
    });
    QVERIFY(middle.dead);
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(r.text, m_reference.text);
    QCOMPARE(streamed, m_reference.text);  // nothing streamed before the death was taken back
    const std::vector<RecoveryEvent> events = c->recoveries();
    QCOMPARE(events.size(), size_t(1));
    QCOMPARE(events[0].failedNodeId, before[1].nodeId);
    QCOMPARE(events[0].generatedBefore, dieAt);
    for (const StagePlacement& s : c->deployed()) QVERIFY(s.nodeId != before[1].nodeId);
    QCOMPARE(c->nodes().size(), size_t(3));
  }

  // Four generations at once over three nodes (continuous batching, three batches in flight);
  // the middle node dies mid-way: the pool re-plans and every generation replays its own tokens.
  // Each reply equals its solo greedy run on one local chain.
  void fourGenerationsInFlightSurviveTheMiddleNodeDying() {
    const char* prompts[] = {"The three primary colors are", "Water boils at",
                             "The capital of Italy is", "A haiku about autumn:"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 24, requests, want);
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 5; ++i) {
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    }
    CoordinatorOptions o = options();
    o.maxSequences = 4;
    auto c = deployed(fakes, addrs, o);
    const std::vector<StagePlacement> before = c->deployed();
    QVERIFY(before.size() >= 3);  // four KV slots need more room than one
    FakeNode& middle = fakes.byId(before[1].nodeId);
    middle.dieAfterForwards(30);  // one forward per segment: a few steps into the replies

    std::vector<std::string> streamed(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].onText = [&streamed, i](std::string_view piece) {
        streamed[i] += piece;
        return true;
      };
    }
    const std::vector<Coordinator::PoolReply> got = c->generateConcurrently(requests);
    QVERIFY(middle.dead);
    QCOMPARE(got.size(), requests.size());
    for (size_t i = 0; i < got.size(); ++i) {
      QVERIFY2(got[i].error.empty(), got[i].error.c_str());
      QCOMPARE(got[i].result.tokens, want[i].tokens);
      QCOMPARE(got[i].result.text, want[i].text);
      QCOMPARE(streamed[i], want[i].text);
      QCOMPARE(got[i].result.recoveries, 1);
    }
    QCOMPARE(c->recoveries().size(), size_t(1));
    for (const StagePlacement& s : c->deployed()) QVERIFY(s.nodeId != before[1].nodeId);
    // The single-sequence path still works on the same deployment afterwards.
    const runtime::GenerateResult again = c->generate(requests[0].prompt, greedy(24));
    QCOMPARE(again.tokens, want[0].tokens);
  }

  // Six generations over two nodes: each node gets one forward per batch of several sequences
  // (weights read once for all of them), and every reply equals its solo greedy run.
  void severalSequencesShareOneForwardPerNode() {
    const char* prompts[] = {
        "The three primary colors are", "Water boils at",  "The capital of Italy is",
        "A haiku about autumn:",        "Two plus two is", "My favourite fruit is"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 12, requests, want);
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 2; ++i) {
      addrs.push_back(fakes.add(config(i, 5 * m_fortyPercent), *m_model, m_sha, *m_backend));
    }
    CoordinatorOptions o = options();
    o.maxSequences = 6;
    auto c = deployed(fakes, addrs, o);
    const std::vector<Coordinator::PoolReply> got = c->generateConcurrently(requests);
    for (size_t i = 0; i < got.size(); ++i) {
      QVERIFY2(got[i].error.empty(), got[i].error.c_str());
      QCOMPARE(got[i].result.tokens, want[i].tokens);
    }
    int batched = 0;
    for (const auto& node : fakes.nodes) batched += node->batchedForwards;
    QVERIFY2(batched > 0, "no forward carried several sequences");
  }

  void promptLongerThanABatchGoesThroughTheNodesInMicroBatches() {
    // Batches of 2 rows: the prompt is several micro-batches, k + 1 entering the first node
    // while k is in the second (Chain's wavefront over the RemoteStages).
    constexpr int32_t kBatch = 2;
    QVERIFY(m_prompt.size() > size_t(2 * kBatch));
    runtime::Chain chain = localChain(kBatch);
    runtime::Session session(chain, m_model->tokenizer());
    const runtime::GenerateResult want = session.generate(m_prompt, greedy(16));

    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    CoordinatorOptions o = options();
    o.maxBatch = kBatch;
    auto c = deployed(fakes, addrs, o);
    const runtime::GenerateResult r = c->generate(m_prompt, greedy(16));
    QCOMPARE(r.tokens, want.tokens);
    const size_t microBatches = (m_prompt.size() + kBatch - 1) / kBatch;
    // The prompt's micro-batches, then one forward per later token.
    QCOMPARE(size_t(fakes.byId(c->deployed()[1].nodeId).forwards), microBatches + 15);
  }

  void followUpPromptReusesTheCachedPrefix() {
    // A chat's next turn: the previous prompt and reply plus new text.
    const std::vector<model::TokenId> more = m_model->tokenizer().encode(" Why?", false, false);
    runtime::Chain chain = localChain();
    runtime::Session session(chain, m_model->tokenizer());
    const runtime::GenerateResult first = session.generate(m_prompt, greedy(8));
    std::vector<model::TokenId> next = m_prompt;
    next.insert(next.end(), first.tokens.begin(), first.tokens.end());
    next.insert(next.end(), more.begin(), more.end());
    const runtime::GenerateResult want = session.generate(next, greedy(8));

    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    QCOMPARE(c->generate(m_prompt, greedy(8)).tokens, first.tokens);
    const runtime::GenerateResult r = c->generate(next, greedy(8));
    QCOMPARE(r.tokens, want.tokens);
    // The first prompt and the reply's tokens fed back are not computed again.
    QCOMPARE(r.reusedTokens, int32_t(m_prompt.size() + first.tokens.size() - 1));
  }

  // Issue 20: a re-plan reuses what the nodes hold. No node has the model file; the spare cached
  // the middle node's layers in an earlier run (its shard cache). When the middle node dies the
  // spare takes exactly those layers back from its cache and the others keep their stages:
  // nothing is streamed, and the reply is unchanged.
  void aSpareThatCachedTheLostNodesLayersTakesThemWithoutStreaming() {
    // Four nodes without the file; node `spare` has `range` in its shard cache.
    auto withoutFile = [&](FakePool& fakes, size_t spare, std::pair<int32_t, int32_t> range) {
      std::vector<std::string> addrs;
      for (size_t i = 0; i < 4; ++i) {
        FakeNodeConfig cfg = config(int(i), m_fortyPercent);
        cfg.hasModelFile = false;
        if (i == spare) cfg.cachedRanges = {range};
        addrs.push_back(fakes.add(cfg, *m_model, m_sha, *m_backend));
      }
      return addrs;
    };
    // Where a plan puts the layers, and which node it leaves spare.
    FakePool first;
    auto planner = deployed(first, withoutFile(first, 4, {0, 0}));
    const plan::Plan plan = planner->makePlan();
    planner->deploy(plan);
    const std::vector<StagePlacement> layout = planner->deployed();
    QCOMPARE(layout.size(), size_t(3));
    std::set<std::string> used;
    for (const StagePlacement& s : layout) used.insert(s.nodeId);
    size_t spare = 0;
    while (used.count(first.nodes[spare]->info().deviceId)) ++spare;

    // The same nodes (same ids), the spare with the middle stage's layers cached, deployed as
    // that plan (measured link times vary by microseconds, which could tip a fresh plan).
    FakePool fakes;
    const auto addrs = withoutFile(fakes, spare, {layout[1].firstLayer, layout[1].lastLayer});
    auto c = std::make_unique<Coordinator>(fakes.connector(), options());
    for (const std::string& a : addrs) c->addNode(a);
    c->profileLinks();
    c->setModel(modelPath());
    c->deploy(plan);
    QCOMPARE(c->deployed(), layout);
    std::map<std::string, uint64_t> streamedBefore;
    for (const auto& n : fakes.nodes) streamedBefore[n->info().deviceId] = n->streamedBytes;
    fakes.byId(layout[1].nodeId).dieAfterForwards(10);

    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(c->recoveries().size(), size_t(1));
    FakeNode& taker = *fakes.nodes[spare];
    QCOMPARE(taker.loadSources, std::vector<std::string>{"shard-cache"});
    for (const auto& n : fakes.nodes) {
      QCOMPARE(n->streamedBytes, streamedBefore[n->info().deviceId]);
    }
    QCOMPARE(c->recoveries()[0].movedBytes > 0, true);  // the spare loads layers, from its cache
  }

  void nodeLostBetweenTwoRepliesIsReplacedForTheNext() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 4; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    QCOMPARE(
        c->generate(m_prompt, greedy(8)).tokens,
        std::vector<model::TokenId>(m_reference.tokens.begin(), m_reference.tokens.begin() + 8));
    const std::string lost = c->deployed()[1].nodeId;
    fakes.byId(lost).dead = true;  // its connection resets before the next request
    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(c->recoveries().size(), size_t(1));
    QCOMPARE(c->recoveries()[0].failedNodeId, lost);
    QCOMPARE(c->recoveries()[0].generatedBefore, 0);
    QCOMPARE(r.recoveries, 1);
  }

  void losingANodeTheRestCannotReplaceIsAnError() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    FakeNode& middle = fakes.byId(c->deployed()[1].nodeId);
    middle.dieAfterForwards(3);
    QVERIFY_THROWS_EXCEPTION(Error, c->generate(m_prompt, greedy()));
  }

  void nodeWithoutTheModelFileGetsItsWeightsStreamed() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i) {
      FakeNodeConfig cfg = config(i, m_fortyPercent);
      cfg.hasModelFile = i != 1;
      addrs.push_back(fakes.add(cfg, *m_model, m_sha, *m_backend));
    }
    auto c = std::make_unique<Coordinator>(fakes.connector(), options());
    for (const std::string& a : addrs) c->addNode(a);
    c->setModel(modelPath());
    uint64_t lastSent = 0, lastTotal = 0;
    size_t readyStages = 0;
    c->deploy(c->makePlan(), [&](const DeployProgress& p) {
      if (p.bytesTotal) {
        lastSent = p.bytesSent;
        lastTotal = p.bytesTotal;
      }
      if (p.done) ++readyStages;
    });
    QCOMPARE(readyStages, size_t(3));
    FakeNode& streamedTo = *fakes.nodes[1];
    QCOMPARE(streamedTo.loadSources, std::vector<std::string>{"streamed"});
    QVERIFY(streamedTo.streamedBytes > 0);
    QCOMPARE(lastSent, lastTotal);
    QCOMPARE(lastTotal, streamedTo.streamedBytes);
    QCOMPARE(fakes.nodes[0]->loadSources, std::vector<std::string>{"local-file"});
    QCOMPARE(
        c->generate(m_prompt, greedy(8)).tokens,
        std::vector<model::TokenId>(m_reference.tokens.begin(), m_reference.tokens.begin() + 8));
  }

  void stopStringEndsTheReplyBeforeIt() {
    // A stop string taken from inside the reference reply.
    const std::string& ref = m_reference.text;
    QVERIFY(ref.size() > 20);
    const std::string stop = ref.substr(12, 4);
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 3; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    runtime::GenerateOptions g = greedy();
    g.stop = {stop};
    const runtime::GenerateResult r = c->generate(m_prompt, g);
    QCOMPARE(r.finish, runtime::FinishReason::StopString);
    QCOMPARE(r.text, ref.substr(0, ref.find(stop)));
  }

  // A model that fits one node: the pool is that node alone, and the session asks it for
  // several tokens per request (decode ahead) instead of one round trip per token. The reply is
  // the one decoding token by token gives: greedy, sampled with a seed, cut by a stop string in
  // the middle of a burst (and the follow-up that reuses the cache), and across the node's death
  // (the spare takes the model and the burst is replayed).
  void aOneNodePoolDecodesAheadAndTheReplyIsUnchanged() {
    FakePool fakes;
    const std::string one = fakes.add(config(0, 5 * m_fortyPercent), *m_model, m_sha, *m_backend);
    auto c = deployed(fakes, {one});
    QCOMPARE(c->deployed().size(), size_t(1));
    FakeNode& node = *fakes.nodes[0];

    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QCOMPARE(r.tokens, m_reference.tokens);
    QVERIFY(r.aheadSteps > 0);
    // The prompt, then bursts only (2, 4, 8, ... tokens): every token after the first came
    // decoded ahead.
    QCOMPARE(node.forwards - node.aheadForwards, 1);
    QCOMPARE(node.aheadTokens, kReplyTokens - 1);

    // Sampled: the same draws as token by token (decodeAhead 0), seed for seed.
    runtime::GenerateOptions sampled = greedy();
    sampled.sampler.temperature = 0.9f;
    sampled.sampler.seed = 1234;
    runtime::GenerateOptions oneByOne = sampled;
    oneByOne.decodeAhead = 0;
    const runtime::GenerateResult a = c->generate(m_prompt, sampled);
    const int before = node.aheadForwards;
    const runtime::GenerateResult b = c->generate(m_prompt, oneByOne);
    QCOMPARE(node.aheadForwards, before);
    QCOMPARE(a.tokens, b.tokens);
    QVERIFY(a.aheadSteps > 0);

    // A stop string inside a burst; the next prompt extends the reply and reuses the cache.
    const std::string stop = m_reference.text.substr(20, 4);
    runtime::GenerateOptions stopped = greedy();
    stopped.stop = {stop};
    const runtime::GenerateResult cut = c->generate(m_prompt, stopped);
    QCOMPARE(cut.finish, runtime::FinishReason::StopString);
    QCOMPARE(cut.text, m_reference.text.substr(0, m_reference.text.find(stop)));
    std::vector<model::TokenId> followUp = m_prompt;
    followUp.insert(followUp.end(), m_reference.tokens.begin(), m_reference.tokens.begin() + 10);
    runtime::Chain chain = localChain();
    runtime::Session local(chain, m_model->tokenizer());
    const runtime::GenerateResult want = local.generate(followUp, greedy(16));
    const runtime::GenerateResult got = c->generate(followUp, greedy(16));
    QVERIFY(got.reusedTokens > 0);
    QCOMPARE(got.tokens, want.tokens);
  }

  // The API's scheduler over a one-node pool: a greedy generation alone decodes ahead in bursts;
  // two at once are batched as usual; every reply equals its solo run. A sampled one decodes
  // ahead too (each token drawn by position, drawsByPosition), and its reply is the one drawn
  // token by token: by the scheduler without bursts (the node samples each token), and by a local
  // Session on the CPU (which draws from the logits itself).
  void theSchedulerDecodesAheadForAGenerationAlone() {
    const char* prompts[] = {"The three primary colors are", "Water boils at"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 24, requests, want);
    FakePool fakes;
    CoordinatorOptions o = options();
    o.maxSequences = 2;
    auto c =
        deployed(fakes, {fakes.add(config(0, 5 * m_fortyPercent), *m_model, m_sha, *m_backend)}, o);
    FakeNode& node = *fakes.nodes[0];
    const auto alone = serveReplicas(*c, {{requests[0]}}, m_model->tokenizer());
    QVERIFY2(alone[0][0].error.empty(), alone[0][0].error.c_str());
    QCOMPARE(alone[0][0].result.tokens, want[0].tokens);
    QVERIFY(alone[0][0].result.aheadSteps > 0);
    // The prompt, then bursts only: every token after the first came decoded ahead.
    QCOMPARE(node.forwards - node.aheadForwards, 1);
    QCOMPARE(node.aheadTokens, 23);
    const auto together = serveReplicas(*c, {{requests[0], requests[1]}}, m_model->tokenizer());
    for (size_t i = 0; i < 2; ++i) {
      QVERIFY2(together[0][i].error.empty(), together[0][i].error.c_str());
      QCOMPARE(together[0][i].result.tokens, want[i].tokens);
    }

    Coordinator::PoolRequest sampled = requests[0];
    sampled.options.sampler.temperature = 0.9f;
    sampled.options.sampler.topK = 0;  // the whole vocabulary: draws differ more often
    sampled.options.sampler.seed = 1234;
    Coordinator::PoolRequest oneByOne = sampled;
    oneByOne.options.decodeAhead = 0;
    const int aheadBefore = node.aheadForwards;
    const auto drawn = serveReplicas(*c, {{sampled}}, m_model->tokenizer());
    QVERIFY2(drawn[0][0].error.empty(), drawn[0][0].error.c_str());
    QVERIFY(drawn[0][0].result.aheadSteps > 0);
    QVERIFY(node.aheadForwards > aheadBefore);
    const int forwardsBefore = node.forwards;
    const auto stepped = serveReplicas(*c, {{oneByOne}}, m_model->tokenizer());
    QVERIFY2(stepped[0][0].error.empty(), stepped[0][0].error.c_str());
    QCOMPARE(stepped[0][0].result.aheadSteps, 0);
    QVERIFY(node.forwards - forwardsBefore > 10);  // a request per token
    QCOMPARE(drawn[0][0].result.tokens, stepped[0][0].result.tokens);
    runtime::Chain chain = localChain();
    runtime::Session local(chain, m_model->tokenizer());
    const runtime::GenerateResult here = local.generate(sampled.prompt, sampled.options);
    QCOMPARE(drawn[0][0].result.tokens, here.tokens);
    // Not the greedy reply: the draws did something.
    QVERIFY(drawn[0][0].result.tokens != want[0].tokens);
  }

  // Several sampled generations at once over the pool (the API at the usual temperatures): the
  // last node samples each sequence's row with its own request (kFeatureSegmentSample), so no
  // logits cross the network, and each reply is the one a local Session draws; a node without
  // the feature returns the logits and the replies are the same.
  void concurrentSampledRepliesAreSampledOnTheNode() {
    const char* prompts[] = {"The three primary colors are", "Water boils at", "Once upon a time"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 16, requests, want);
    want.clear();
    for (size_t i = 0; i < requests.size(); ++i) {
      runtime::GenerateOptions& o = requests[i].options;
      o.sampler.temperature = i == 2 ? 0.0f : 0.9f;  // a greedy one among them
      o.sampler.topK = 0;
      o.sampler.seed = 100 + i;
      runtime::Chain chain = localChain();
      runtime::Session local(chain, m_model->tokenizer());
      want.push_back(local.generate(requests[i].prompt, o));
    }
    for (const bool feature : {true, false}) {
      FakePool fakes;
      FakeNodeConfig one = config(0, 5 * m_fortyPercent);
      one.segmentSample = feature;
      CoordinatorOptions o = options();
      o.maxSequences = 3;
      auto c = deployed(fakes, {fakes.add(one, *m_model, m_sha, *m_backend)}, o);
      FakeNode& node = *fakes.nodes[0];
      const auto got = serveReplicas(*c, {requests}, m_model->tokenizer());
      for (size_t i = 0; i < requests.size(); ++i) {
        QVERIFY2(got[0][i].error.empty(), got[0][i].error.c_str());
        QCOMPARE(got[0][i].result.tokens, want[i].tokens);
      }
      QVERIFY(node.batchedForwards > 0);
      QCOMPARE(node.segmentSamples > 0, feature);
    }
  }

  void aNodeLostMidBurstIsReplacedAndTheReplyIsUnchanged() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 2; ++i) {
      addrs.push_back(fakes.add(config(i, 5 * m_fortyPercent), *m_model, m_sha, *m_backend));
    }
    auto c = deployed(fakes, addrs);
    QCOMPARE(c->deployed().size(), size_t(1));
    FakeNode& first = fakes.byId(c->deployed()[0].nodeId);
    first.dieAfterForwards(3);  // the prompt, two bursts, then it dies
    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QVERIFY(first.dead);
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(r.recoveries, 1);
    QVERIFY(c->deployed()[0].nodeId != first.info().deviceId);
  }

  void aNodeThatCannotDecodeAheadGetsOneTokenPerRequest() {
    FakePool fakes;
    FakeNodeConfig old = config(0, 5 * m_fortyPercent);
    old.decodeAhead = false;
    auto c = deployed(fakes, {fakes.add(old, *m_model, m_sha, *m_backend)});
    const runtime::GenerateResult r = c->generate(m_prompt, greedy());
    QCOMPARE(r.tokens, m_reference.tokens);
    QCOMPARE(r.aheadSteps, 0);
    QCOMPARE(fakes.nodes[0]->aheadForwards, 0);
  }

  void snapshotCoversEveryNodeWithItsLayers() {
    FakePool fakes;
    std::vector<std::string> addrs;
    for (int i = 0; i < 4; ++i)
      addrs.push_back(fakes.add(config(i, m_fortyPercent), *m_model, m_sha, *m_backend));
    auto c = deployed(fakes, addrs);
    const PoolSnapshot s = c->pollSnapshot();
    QCOMPARE(s.devices.size(), size_t(4));
    QCOMPARE(s.modelLayers, m_model->config().nLayer);
    QVERIFY(s.predictedTokensPerS > 0);
    int holding = 0;
    for (const DeviceTelemetry& d : s.devices) {
      QCOMPARE(d.busyFraction, 0.25);  // the fake's figure came through
      if (d.firstLayer >= 0) ++holding;
    }
    QCOMPARE(holding, 3);
    QCOMPARE(s.links.size(), size_t(2));
    for (const LinkTelemetry& l : s.links) QVERIFY(l.rttMs > 0);
  }

  void telemetryPollerCallsBackUntilStopped() {
    FakePool fakes;
    auto c = std::make_unique<Coordinator>(fakes.connector(), options());
    c->addNode(fakes.add(config(0, m_fortyPercent), *m_model, m_sha, *m_backend));
    std::atomic<int> calls{0};
    c->startTelemetry(
        [&](const PoolSnapshot& s) {
          if (s.devices.size() == 1) ++calls;
        },
        std::chrono::milliseconds(10));
    for (int i = 0; i < 500 && calls.load() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c->stopTelemetry();
    const int after = calls.load();
    QVERIFY(after >= 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    QCOMPARE(calls.load(), after);
  }

  void aMemberNoLongerTrustedIsDroppedAtTheNextPoll() {
    // `shoal-cli pool forget ID` on the app's config directory: the app's trust store stops
    // trusting the node, and its telemetry tick drops it.
    FakePool fakes;
    std::mutex trustedMutex;
    std::set<std::string> trusted = {config(0, 0).deviceId, config(1, 0).deviceId};
    CoordinatorOptions o = options();
    o.isTrusted = [&](const std::string& id) {
      std::lock_guard lock(trustedMutex);
      return trusted.count(id) > 0;
    };
    Coordinator c(fakes.connector(), o);
    c.addNode(fakes.add(config(0, m_fortyPercent), *m_model, m_sha, *m_backend));
    c.addNode(fakes.add(config(1, m_fortyPercent), *m_model, m_sha, *m_backend));
    {
      std::lock_guard lock(trustedMutex);
      trusted.erase(config(0, 0).deviceId);
    }
    const PoolSnapshot s = c.pollSnapshot();
    QCOMPARE(c.nodes().size(), size_t(1));
    QCOMPARE(c.nodes().front().deviceId, config(1, 0).deviceId);
    QCOMPARE(s.devices.size(), size_t(1));
  }

  // Replicas (CoordinatorOptions::maxPipelines): deploys `nodes` fakes (80% of the model each,
  // so a replica takes two), each with a CPU backend of its own (replicas compute on threads of
  // their own, and a backend's thread pool serves one caller at a time), as two replicas.
  std::unique_ptr<Coordinator> twoReplicas(FakePool& fakes, int nodes,
                                           std::vector<std::unique_ptr<runtime::Backend>>& cpus) {
    std::vector<std::string> addrs;
    for (int i = 0; i < nodes; ++i) {
      kernels::BackendOptions bo;
      bo.cpuThreads = 1;
      cpus.push_back(kernels::createBackend("cpu", bo));
      addrs.push_back(fakes.add(config(i, m_fortyPercent * 2), *m_model, m_sha, *cpus.back()));
    }
    CoordinatorOptions o = options();
    o.maxSequences = 2;
    o.maxPipelines = 2;
    return deployed(fakes, addrs, o);
  }

  // Runs each replica's requests on a scheduler of its own, on a thread each, as `pool serve`
  // does; returns the replies of every replica, in order.
  static std::vector<std::vector<Coordinator::PoolReply>> serveReplicas(
      Coordinator& c, const std::vector<std::vector<Coordinator::PoolRequest>>& perReplica,
      const model::Tokenizer& tokenizer) {
    std::vector<std::vector<Coordinator::PoolReply>> replies(perReplica.size());
    c.serve([&](std::vector<Coordinator::ServedReplica>& replicas) {
      QCOMPARE(replicas.size(), perReplica.size());
      std::vector<std::thread> threads;
      for (size_t r = 0; r < replicas.size(); ++r) {
        replies[r].resize(perReplica[r].size());
        threads.emplace_back([&, r] {
          runtime::Scheduler scheduler(*replicas[r].chain, tokenizer, replicas[r].options);
          for (size_t i = 0; i < perReplica[r].size(); ++i) {
            runtime::Scheduler::Request q;
            q.prompt = perReplica[r][i].prompt;
            q.options = perReplica[r][i].options;
            q.onFinish = [&, r, i](const runtime::GenerateResult& result, std::string_view error) {
              replies[r][i].result = result;
              replies[r][i].error = std::string(error);
            };
            scheduler.add(std::move(q));
          }
          scheduler.runUntilIdle();
        });
      }
      for (std::thread& t : threads) t.join();
    });
    return replies;
  }

  static std::set<std::string> nodesOf(const std::vector<StagePlacement>& stages) {
    std::set<std::string> out;
    for (const StagePlacement& s : stages) out.insert(s.nodeId);
    return out;
  }

  // Two replicas on disjoint nodes serve at once; a node of the second dies mid-way: only that
  // replica is re-planned (onto the spare node), and every reply of both equals its solo run.
  void aReplicaThatLosesANodeIsRebuiltOnTheSpareWhileTheOtherServes() {
    const char* prompts[] = {"The three primary colors are", "Water boils at",
                             "The capital of Italy is", "A haiku about autumn:"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 16, requests, want);
    FakePool fakes;
    std::vector<std::unique_ptr<runtime::Backend>> cpus;
    auto c = twoReplicas(fakes, 5, cpus);
    QCOMPARE(c->replicaCount(), size_t(2));
    const std::vector<StagePlacement> first = c->deployed(0);
    const std::vector<StagePlacement> second = c->deployed(1);
    QCOMPARE(first.size(), size_t(2));
    QCOMPARE(second.size(), size_t(2));
    std::set<std::string> used = nodesOf(first);
    for (const std::string& n : nodesOf(second)) QVERIFY(used.insert(n).second);  // disjoint
    QVERIFY(c->predictedTokensPerS() > c->predictedTokensPerS(0));

    FakeNode& victim = fakes.byId(second[1].nodeId);
    victim.dieAfterForwards(12);
    const auto got = serveReplicas(*c, {{requests[0], requests[1]}, {requests[2], requests[3]}},
                                   m_model->tokenizer());
    QVERIFY(victim.dead);
    for (size_t r = 0; r < 2; ++r) {
      for (size_t i = 0; i < 2; ++i) {
        const Coordinator::PoolReply& reply = got[r][i];
        QVERIFY2(reply.error.empty(), reply.error.c_str());
        QCOMPARE(reply.result.tokens, want[2 * r + i].tokens);
        QCOMPARE(reply.result.recoveries, r == 1 ? 1 : 0);
      }
    }
    const std::vector<RecoveryEvent> events = c->recoveries();
    QCOMPARE(events.size(), size_t(1));
    QCOMPARE(events[0].replica, size_t(1));
    QCOMPARE(c->deployed(0), first);  // untouched
    const std::set<std::string> rebuilt = nodesOf(c->deployed(1));
    QVERIFY(!rebuilt.count(second[1].nodeId));
    for (const std::string& n : rebuilt) QVERIFY(!nodesOf(first).count(n));
  }

  // Without a spare, a replica that loses a node is retired: its generations fail with the
  // reason, the other replica's complete, and requests are routed to the survivor only.
  void aReplicaThatCannotBeRebuiltIsRetiredAndNoLongerRouted() {
    const char* prompts[] = {"The three primary colors are", "Water boils at"};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    greedyRequests(prompts, 12, requests, want);
    FakePool fakes;
    std::vector<std::unique_ptr<runtime::Backend>> cpus;
    auto c = twoReplicas(fakes, 4, cpus);
    QCOMPARE(c->replicaCount(), size_t(2));
    fakes.byId(c->deployed(0)[0].nodeId).dieAfterForwards(5);
    const auto got = serveReplicas(*c, {{requests[0]}, {requests[1]}}, m_model->tokenizer());
    QVERIFY(!got[0][0].error.empty());
    QVERIFY2(got[0][0].error.find("no spare node") != std::string::npos ||
                 got[0][0].error.find("cannot hold the model") != std::string::npos,
             got[0][0].error.c_str());
    QVERIFY2(got[1][0].error.empty(), got[1][0].error.c_str());
    QCOMPARE(got[1][0].result.tokens, want[1].tokens);
    QVERIFY(c->deployed(0).empty());
    QCOMPARE(c->routeRequest({{0, 0}, {5, 0}}), 1);  // even loaded, the survivor
  }

  // Phase 2 over whole replicas: the idle one over a loaded one, a full one only when all are,
  // and what was measured over what was planned.
  void requestsAreRoutedByLiveLoad() {
    FakePool fakes;
    std::vector<std::unique_ptr<runtime::Backend>> cpus;
    auto c = twoReplicas(fakes, 4, cpus);
    QCOMPARE(c->replicaCount(), size_t(2));
    QCOMPARE(c->routeRequest({{1, 0}, {0, 0}}), 1);
    QCOMPARE(c->routeRequest({{0, 0}, {1, 0}}), 0);
    QCOMPARE(c->routeRequest({{2, 0}, {1, 0}}), 1);  // replica 0 full (2 slots)
    QCOMPARE(c->routeRequest({{1, 0}, {2, 0}}), 0);
    // Equal load: a replica measured ten times slower than the other loses.
    QCOMPARE(c->routeRequest({{0, 1.0}, {0, 0.1}}), 1);
    QCOMPARE(c->routeRequest({{0, 0.1}, {0, 1.0}}), 0);
  }

  void generateWithoutADeployedPipelineIsRefused() {
    FakePool fakes;
    Coordinator c(fakes.connector(), options());
    c.setModel(modelPath());
    QVERIFY_THROWS_EXCEPTION(Error, c.generate(m_prompt, greedy()));
  }

  void unreachableNodeIsATransportError() {
    FakePool fakes;
    Coordinator c(fakes.connector(), options());
    QVERIFY_THROWS_EXCEPTION(TransportError, c.addNode("nowhere:1"));
  }
};

QTEST_GUILESS_MAIN(TestPoolCoordinator)
#include "test_pool_coordinator.moc"
