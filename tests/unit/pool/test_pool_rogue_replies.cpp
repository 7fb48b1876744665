// The coordinator against nodes whose replies are damaged at random: fake nodes (real CPU stages
// of the default model) answer, and a connection between them and the coordinator mutates a
// share of the replies (fields removed or of another type or at a limit, blobs cut, grown or
// filled with random bytes; tests/integration/lan_node/json_mutator.h). A pool member is trusted,
// but a buggy or compromised one must not take the coordinator down (the app, shoal-cli pool):
// adding nodes, planning, deploying and generating either work or fail with shoal::Error or
// TransportError, never another exception, a crash or a hang. The ASan + UBSan build runs it too.
//
// The seed is fixed, so a failure repeats; SHOAL_MUTATION_SEED and SHOAL_MUTATION_ROUNDS explore
// further.

#include <QtTest>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeinfo>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "kernels/backend_registry.h"
#include "lan/pool/coordinator.h"
#include "lan/pool/sha256.h"
#include "tests/integration/lan_node/json_mutator.h"
#include "tests/unit/pool/fake_node.h"

using namespace shoal;
using namespace shoal::lan;
using shoal::lan::testing::FakeConnection;
using shoal::lan::testing::FakeNode;
using shoal::lan::testing::FakeNodeConfig;

namespace {

constexpr int32_t kContext = 128;

std::string modelPath() {
  return std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The replies of one shared, seeded mutator (the coordinator reads on several threads).
struct ReplyDamage {
  std::mutex mutex;
  test::Mutator mutator;
  int percent = 0;  // of the replies that are damaged
  int damaged = 0;
  explicit ReplyDamage(uint64_t seed) : mutator(seed) {}

  void apply(Message& m) {
    std::lock_guard lock(mutex);
    if (!mutator.chance(percent)) return;
    ++damaged;
    if (m.blob.empty() || mutator.chance(60)) {
      mutator.mutate(m.control);
    } else {
      mutator.mutateBlob(m.blob);
    }
  }
};

// A fake node's connection whose replies pass through `damage`.
class DamagingConnection final : public Connection {
 public:
  DamagingConnection(FakeNode& node, const std::string& address, ReplyDamage& damage)
      : m_inner(node, address), m_damage(damage) {}
  void send(const Message& message, std::chrono::milliseconds timeout) override {
    m_inner.send(message, timeout);
  }
  Message receive(std::chrono::milliseconds timeout) override {
    Message m = m_inner.receive(timeout);
    m_damage.apply(m);
    return m;
  }
  const std::string& peerDeviceId() const override { return m_inner.peerDeviceId(); }
  const std::string& peerAddress() const override { return m_inner.peerAddress(); }
  void close() override { m_inner.close(); }
  bool isOpen() const override { return m_inner.isOpen(); }
  ConnectionStats stats() const override { return m_inner.stats(); }

 private:
  FakeConnection m_inner;
  ReplyDamage& m_damage;
};

}  // namespace

class TestPoolRogueReplies : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<runtime::Backend> m_backend;
  std::string m_sha;
  uint64_t m_halfModel = 0;  // memory for about half the model: two or three nodes are needed

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(modelPath())) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(modelPath());
    kernels::BackendOptions bo;
    bo.cpuThreads = 1;
    m_backend = kernels::createBackend("cpu", bo);
    m_sha = sha256FileHex(modelPath());
    plan::Request r;
    r.contextTokens = kContext;
    m_halfModel = static_cast<uint64_t>(
        0.55 * plan::splitMemoryBytes(plan::modelCostFromGguf(m_model->file(), kContext), r));
  }

  void damagedRepliesFailCleanlyOrAreSurvived() {
    const int64_t rounds = test::envInt("SHOAL_MUTATION_ROUNDS", 40);
    const auto seed = uint64_t(test::envInt("SHOAL_MUTATION_SEED", 20261207));
    ReplyDamage damage(seed);
    const std::vector<model::TokenId> prompt =
        m_model->tokenizer().encode("The three primary colors are", true, false);
    std::map<std::string, int> outcomes;
    for (int64_t round = 0; round < rounds; ++round) {
      // From a reply in fifty damaged to one in three: deploys that get far, and ones that don't.
      damage.percent = 2 + int(round % 5) * 8;
      std::vector<std::unique_ptr<FakeNode>> nodes;
      std::map<std::string, FakeNode*> byAddress;
      for (int i = 0; i < 3; ++i) {
        FakeNodeConfig c;
        c.name = "node" + std::to_string(i);
        c.deviceId = "NODE" + std::to_string(i) + "-AAAAAAA";
        c.memoryBytes = m_halfModel;
        c.hasModelFile = i != 2;  // one streams: weights_chunk and weights_done replies too
        nodes.push_back(std::make_unique<FakeNode>(c, *m_model, m_sha, *m_backend));
        byAddress["fake-" + std::to_string(i) + ":7000"] = nodes.back().get();
      }
      Connector connector = [&](const std::string& address) -> std::unique_ptr<Connection> {
        const auto it = byAddress.find(address);
        if (it == byAddress.end()) {
          throw TransportError(TransportError::Kind::Io, address + ": connection refused");
        }
        return std::make_unique<DamagingConnection>(*it->second, address, damage);
      };
      CoordinatorOptions o;
      o.contextLength = kContext;
      o.pingSamples = 2;
      o.bandwidthProbeBytes = 1024;
      o.requestTimeout = std::chrono::milliseconds(2000);
      o.loadTimeout = std::chrono::milliseconds(5000);
      std::string outcome = "generated";
      try {
        Coordinator c(connector, o);
        for (const auto& [address, node] : byAddress) {
          try {
            c.addNode(address);
          } catch (const Error&) {
            // A node whose node_info was damaged is refused; the pool goes on without it.
          } catch (const TransportError&) {
          }
        }
        c.profileLinks();
        c.setModel(modelPath());
        c.deploy(c.makePlan());
        runtime::GenerateOptions g;
        g.maxTokens = 6;
        g.sampler.temperature = 0;
        g.ignoreEndOfGeneration = true;
        const runtime::GenerateResult r = c.generate(prompt, g);
        for (const model::TokenId t : r.tokens) {
          QVERIFY2(t >= 0 && t < m_model->config().nVocab, qPrintable(QString::number(t)));
        }
      } catch (const Error& e) {
        outcome = "shoal::Error";
        if (std::getenv("SHOAL_MUTATION_VERBOSE"))
          qInfo("round %lld: %s", (long long)round, e.what());
      } catch (const TransportError&) {
        outcome = "TransportError";
      } catch (const std::exception& e) {
        QFAIL(qPrintable(QString("round %1: a damaged reply escaped as %2: %3")
                             .arg(round)
                             .arg(typeid(e).name())
                             .arg(e.what())));
      }
      ++outcomes[outcome];
    }
    std::string summary;
    for (const auto& [o, n] : outcomes) summary += o + " " + std::to_string(n) + ", ";
    qInfo("seed %llu: %lld rounds, %d replies damaged; %s", static_cast<unsigned long long>(seed),
          static_cast<long long>(rounds), damage.damaged, summary.c_str());
    // Both kinds of round happen: some survive their damage, some fail cleanly.
    QVERIFY(outcomes["generated"] > 0);
    QVERIFY(outcomes["shoal::Error"] + outcomes["TransportError"] > 0);
  }
};

QTEST_GUILESS_MAIN(TestPoolRogueReplies)
#include "test_pool_rogue_replies.moc"
