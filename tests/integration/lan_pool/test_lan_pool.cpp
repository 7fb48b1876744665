// The coordinator against real shoal-node processes on loopback: four nodes (one without the
// model file, so its weights are streamed), the model forced over three of them by a memory cap.
// A middle node is killed with SIGKILL during a 200-token greedy reply: the reply completes,
// nothing streamed before the kill changes, and the whole reply equals the single-chain greedy
// reply. Then 200 short generations in a row on three nodes: none fails and this process's
// open file descriptors do not grow.

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <csignal>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "engine/runtime/session.h"
#include "kernels/backend_registry.h"
#include "lan/pool/coordinator.h"
#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

constexpr int32_t kContext = 512;
const char* kPrompt = "Write a short story about a lighthouse keeper.";

std::string modelPath() {
  return std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

size_t openFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

class TestLanPool : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  Identity m_identity;
  std::unique_ptr<TrustStore> m_trust;
  std::vector<std::unique_ptr<QProcess>> m_nodes;
  std::vector<std::string> m_addresses;
  std::vector<std::string> m_nodeIds;
  int m_basePort = 0;
  uint64_t m_memoryCap = 0;
  std::vector<model::TokenId> m_prompt;

  std::string run(const QStringList& args) {
    QProcess p;
    p.start(SHOAL_NODE_BINARY, args);
    if (!p.waitForFinished(60000) || p.exitCode() != 0) {
      throw Error("shoal-node " + args.join(' ').toStdString() +
                  " failed: " + p.readAllStandardError().toStdString());
    }
    return p.readAllStandardOutput().trimmed().toStdString();
  }

  // Starts node i on `port`; hasModel: its models dir holds the model.
  void startNode(int i, int port, bool hasModel) {
    const QString base = m_dir.filePath(QString("node%1").arg(i));
    const QString config = base + "/config", models = base + "/models";
    std::filesystem::create_directories(config.toStdString());
    std::filesystem::create_directories(models.toStdString());
    if (hasModel) {
      std::filesystem::create_symlink(modelPath(),
                                      models.toStdString() + "/SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    const std::string id = run({"--print-device-id", "--config-dir", config});
    m_trust->add(id, "node" + std::to_string(i));
    auto p = std::make_unique<QProcess>();
    p->setProcessChannelMode(QProcess::ForwardedErrorChannel);
    p->start(SHOAL_NODE_BINARY,
             {"--name", QString("node%1").arg(i), "--port", QString::number(port), "--bind",
              "127.0.0.1", "--config-dir", config, "--models-dir", models, "--trust",
              QString::fromStdString(m_identity.deviceId), "--no-discovery", "--threads", "1"});
    QVERIFY(p->waitForStarted(10000));
    m_nodes.push_back(std::move(p));
    m_nodeIds.push_back(id);
    m_addresses.push_back("127.0.0.1:" + std::to_string(port));
  }

  // Waits until a node accepts (it hashes its model files first).
  bool accepting(const std::string& address) {
    for (int attempt = 0; attempt < 300; ++attempt) {
      try {
        connector()(address)->close();
        return true;
      } catch (const TransportError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return false;
  }

  Connector connector() {
    return [this](const std::string& address) {
      const size_t colon = address.rfind(':');
      return connectTo(address.substr(0, colon),
                       static_cast<uint16_t>(std::stoi(address.substr(colon + 1))), m_identity,
                       *m_trust, std::chrono::seconds(10));
    };
  }

  std::unique_ptr<Coordinator> coordinator(size_t nodes) {
    CoordinatorOptions o;
    o.contextLength = kContext;
    o.maxDeviceMemoryBytes = m_memoryCap;
    o.pingSamples = 3;
    o.log = [](const std::string& line) { qInfo("pool: %s", line.c_str()); };
    auto c = std::make_unique<Coordinator>(connector(), o);
    for (size_t i = 0; i < nodes; ++i) c->addNode(m_addresses[i]);
    c->profileLinks();
    c->setModel(modelPath());
    c->deploy(c->makePlan());
    return c;
  }

  // The nodes still running (an earlier test may have killed one).
  std::vector<size_t> runningNodes() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      if (m_nodes[i]->state() == QProcess::Running) out.push_back(i);
    }
    return out;
  }

  // A coordinator over those nodes with the plan deployed (links not profiled, no log).
  std::unique_ptr<Coordinator> deployedOver(const std::vector<size_t>& nodes) {
    CoordinatorOptions o;
    o.contextLength = kContext;
    o.maxDeviceMemoryBytes = m_memoryCap;
    auto c = std::make_unique<Coordinator>(connector(), o);
    for (size_t i : nodes) c->addNode(m_addresses[i]);
    c->setModel(modelPath());
    c->deploy(c->makePlan());
    return c;
  }

  runtime::GenerateOptions greedy(int32_t tokens) {
    runtime::GenerateOptions g;
    g.maxTokens = tokens;
    g.sampler.temperature = 0;
    g.ignoreEndOfGeneration = true;
    return g;
  }

  // The same reply from one CPU chain in this process.
  runtime::GenerateResult singleChain(const model::Model& m, int32_t tokens) {
    return singleChain(m, m_prompt, tokens);
  }
  runtime::GenerateResult singleChain(const model::Model& m,
                                      const std::vector<model::TokenId>& prompt, int32_t tokens) {
    kernels::BackendOptions bo;
    bo.cpuThreads = 1;
    auto backend = kernels::createBackend("cpu", bo);
    runtime::StageSpec spec;
    spec.lastLayer = m.config().nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = kContext;
    runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(backend->createStage("cpu0", src, spec));
    runtime::Chain chain(std::move(stages));
    runtime::Session session(chain, m.tokenizer());
    return session.generate(prompt, greedy(tokens));
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(modelPath())) QSKIP("default model not downloaded");
    QVERIFY(m_dir.isValid());
    m_identity = createIdentity();
    m_trust = std::make_unique<TrustStore>();
    const auto m = model::Model::load(modelPath());
    m_prompt = m->tokenizer().encode(kPrompt, true, false);
    const plan::ModelCost cost = plan::modelCostFromGguf(m->file(), kContext);
    plan::Request r;
    r.contextTokens = kContext;
    // Each node may hold ~40% of the model: three are needed, the fourth is the spare.
    m_memoryCap = static_cast<uint64_t>(0.4 * plan::splitMemoryBytes(cost, r));
    m_basePort = 20000 + static_cast<int>(QCoreApplication::applicationPid() % 20000);
    for (int i = 0; i < 4; ++i) startNode(i, m_basePort + i, i != 3);
    for (const std::string& address : m_addresses) QVERIFY2(accepting(address), address.c_str());
  }

  void cleanupTestCase() {
    for (auto& p : m_nodes) {
      if (p->state() != QProcess::NotRunning) {
        p->terminate();
        if (!p->waitForFinished(10000)) p->kill();
      }
    }
  }

  void killedMiddleNodeDuringA200TokenReplyLeavesTheReplyUnchanged() {
    const auto m = model::Model::load(modelPath());
    const runtime::GenerateResult reference = singleChain(*m, 200);
    auto c = coordinator(4);
    const std::vector<StagePlacement> before = c->deployed();
    QCOMPARE(before.size(), size_t(3));
    size_t victim = 0;
    for (size_t i = 0; i < m_nodeIds.size(); ++i) {
      if (m_nodeIds[i] == before[1].nodeId) victim = i;
    }
    std::string streamed, streamedAtKill;
    int pieces = 0;
    const runtime::GenerateResult r = c->generate(m_prompt, greedy(200), [&](std::string_view p) {
      streamed += p;
      if (++pieces == 60) {
        streamedAtKill = streamed;
        ::kill(static_cast<pid_t>(m_nodes[victim]->processId()), SIGKILL);
      }
      return true;
    });
    QVERIFY(m_nodes[victim]->waitForFinished(10000));
    QVERIFY(!streamedAtKill.empty());
    QCOMPARE(r.tokens, reference.tokens);
    QCOMPARE(r.text, reference.text);
    QCOMPARE(streamed, reference.text);
    QVERIFY(reference.text.rfind(streamedAtKill, 0) == 0);  // text up to the kill unchanged
    const std::vector<RecoveryEvent> events = c->recoveries();
    QCOMPARE(events.size(), size_t(1));
    QCOMPARE(events[0].failedNodeId, m_nodeIds[victim]);
    qInfo("recovered in %.3f s after %d tokens", events[0].seconds, events[0].generatedBefore);
    for (const StagePlacement& s : c->deployed()) QVERIFY(s.nodeId != m_nodeIds[victim]);
  }

  void soakOf200ShortGenerationsHasNoFailuresAndNoFdGrowth() {
    // The three nodes still alive after the previous test (the spare may hold the shard now).
    const std::vector<size_t> alive = runningNodes();
    QVERIFY(alive.size() >= 3);
    const auto pool = deployedOver(alive);
    Coordinator& c = *pool;
    QCOMPARE(c.deployed().size(), size_t(3));
    int failures = 0;
    size_t fdsAfterWarmup = 0;
    for (int i = 0; i < 200; ++i) {
      try {
        const runtime::GenerateResult r = c.generate(m_prompt, greedy(4));
        if (r.tokens.size() != 4) ++failures;
      } catch (const std::exception& e) {
        qWarning("generation %d failed: %s", i, e.what());
        ++failures;
      }
      if (i == 9) fdsAfterWarmup = openFds();
    }
    QCOMPARE(failures, 0);
    QVERIFY(c.recoveries().empty());
    QCOMPARE(openFds(), fdsAfterWarmup);
  }

  // Issue 18's failover test: four replies in flight (continuous batching over the pool, three
  // batches in flight at once), the middle node killed with SIGKILL mid-way; every reply
  // completes and equals its solo greedy run.
  void killedMiddleNodeWithFourRepliesInFlightLeavesEveryReplyUnchanged() {
    // Two nodes with the model join, so that five run: enough that the model still fits on
    // the nodes left once one is killed.
    for (int k = 0; k < 2; ++k) {
      const int next = static_cast<int>(m_nodes.size());
      startNode(next, m_basePort + next, true);
      QVERIFY(accepting(m_addresses.back()));
    }
    const std::vector<size_t> alive = runningNodes();
    QVERIFY(alive.size() >= 5);
    const auto m = model::Model::load(modelPath());
    const char* prompts[] = {"Write a short story about a lighthouse keeper.",
                             "List the planets of the solar system.", "Why is the sky blue?",
                             "Describe a walk in the forest."};
    std::vector<Coordinator::PoolRequest> requests;
    std::vector<runtime::GenerateResult> want;
    for (const char* p : prompts) {
      Coordinator::PoolRequest r;
      r.prompt = m->tokenizer().encode(p, true, false);
      r.options = greedy(100);
      want.push_back(singleChain(*m, r.prompt, 100));
      requests.push_back(std::move(r));
    }
    CoordinatorOptions o;
    o.contextLength = kContext;
    o.maxSequences = 4;
    {
      // ~40% of the model with four sequences' caches per node: three stages or more.
      const plan::ModelCost cost = plan::modelCostFromGguf(m->file(), kContext);
      plan::Request r;
      r.contextTokens = kContext;
      r.sequences = 4;
      o.maxDeviceMemoryBytes = static_cast<uint64_t>(0.4 * plan::splitMemoryBytes(cost, r));
    }
    o.pingSamples = 3;
    o.log = [](const std::string& line) { qInfo("pool: %s", line.c_str()); };
    Coordinator c(connector(), o);
    for (size_t i : alive) c.addNode(m_addresses[i]);
    c.profileLinks();
    c.setModel(modelPath());
    c.deploy(c.makePlan());
    const std::vector<StagePlacement> before = c.deployed();
    // The planner may take every node (it does when the links look fast, as they can under
    // load); the four that outlive the victim still hold the model at 40% each, so recovery
    // has room either way.
    QVERIFY(before.size() >= 3);
    QVERIFY(0.4 * static_cast<double>(alive.size() - 1) >= 1.0);
    size_t victim = 0;
    for (size_t i = 0; i < m_nodeIds.size(); ++i) {
      if (m_nodeIds[i] == before[1].nodeId) victim = i;
    }
    std::vector<std::string> streamed(requests.size());
    int pieces = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      requests[i].onText = [&, i](std::string_view piece) {
        streamed[i] += piece;
        if (i == 0 && ++pieces == 40) {
          ::kill(static_cast<pid_t>(m_nodes[victim]->processId()), SIGKILL);
        }
        return true;
      };
    }
    const std::vector<Coordinator::PoolReply> got = c.generateConcurrently(requests);
    for (size_t i = 0; i < got.size(); ++i) {
      QVERIFY2(got[i].error.empty(), got[i].error.c_str());
      QCOMPARE(got[i].result.tokens, want[i].tokens);
      QCOMPARE(got[i].result.text, want[i].text);
      QCOMPARE(streamed[i], want[i].text);
      QCOMPARE(got[i].result.recoveries, 1);
    }
    QVERIFY(m_nodes[victim]->waitForFinished(10000));
    const std::vector<RecoveryEvent> events = c.recoveries();
    QCOMPARE(events.size(), size_t(1));
    QCOMPARE(events[0].failedNodeId, m_nodeIds[victim]);
    qInfo("4 replies in flight: recovered in %.3f s", events[0].seconds);
  }

  void telemetryPolledDuringAReplyLeavesTheReplyUnchanged() {
    // Polls share each node's connection with the forwards: they must never take a reply meant
    // for the generation (or the other way round).
    const auto m = model::Model::load(modelPath());
    const runtime::GenerateResult reference = singleChain(*m, 40);
    const std::vector<size_t> alive = runningNodes();
    QVERIFY(alive.size() >= 3);
    const auto pool = deployedOver(alive);
    Coordinator& c = *pool;
    std::mutex mutex;
    std::vector<PoolSnapshot> snapshots;
    c.startTelemetry(
        [&](const PoolSnapshot& s) {
          std::lock_guard lock(mutex);
          snapshots.push_back(s);
        },
        std::chrono::milliseconds(5));
    const runtime::GenerateResult r = c.generate(m_prompt, greedy(40));
    c.stopTelemetry();
    QCOMPARE(r.tokens, reference.tokens);
    QVERIFY(!snapshots.empty());
    for (const PoolSnapshot& s : snapshots) {
      QCOMPARE(s.devices.size(), alive.size());
      int holding = 0;
      for (const DeviceTelemetry& d : s.devices) holding += d.firstLayer >= 0 ? 1 : 0;
      QCOMPARE(holding, 3);
      QCOMPARE(s.links.size(), size_t(2));
    }
  }

  void stalledNodeIsDroppedAfterTheRequestTimeout() {
    // Runs after the soak: three nodes are alive. With room for 60% of the model per device
    // two of them hold it, and the third takes over from a node that stops answering
    // (SIGSTOP: the connection stays open, only the reply never comes).
    std::vector<size_t> alive;
    for (size_t i = 0; i < m_nodes.size(); ++i) {
      if (m_nodes[i]->state() == QProcess::Running) alive.push_back(i);
    }
    QVERIFY(alive.size() >= 3);
    const auto m = model::Model::load(modelPath());
    const runtime::GenerateResult reference = singleChain(*m, 40);
    CoordinatorOptions o;
    o.contextLength = kContext;
    o.maxDeviceMemoryBytes = m_memoryCap / 2 * 3;
    o.requestTimeout = std::chrono::milliseconds(2000);
    Coordinator c(connector(), o);
    for (size_t i : alive) c.addNode(m_addresses[i]);
    c.setModel(modelPath());
    c.deploy(c.makePlan());
    const std::string stalledId = c.deployed().front().nodeId;
    size_t stalled = 0;
    for (size_t i = 0; i < m_nodeIds.size(); ++i) {
      if (m_nodeIds[i] == stalledId) stalled = i;
    }
    int pieces = 0;
    const runtime::GenerateResult r = c.generate(m_prompt, greedy(40), [&](std::string_view) {
      if (++pieces == 10) ::kill(static_cast<pid_t>(m_nodes[stalled]->processId()), SIGSTOP);
      return true;
    });
    ::kill(static_cast<pid_t>(m_nodes[stalled]->processId()), SIGKILL);
    QVERIFY(m_nodes[stalled]->waitForFinished(10000));
    QCOMPARE(r.tokens, reference.tokens);
    QCOMPARE(c.recoveries().size(), size_t(1));
    QCOMPARE(c.recoveries()[0].failedNodeId, stalledId);
  }
};

QTEST_GUILESS_MAIN(TestLanPool)
#include "test_lan_pool.moc"
