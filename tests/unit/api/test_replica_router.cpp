// ReplicaRouter (lan/api/replica_router.h) over two real GenerationQueues, each a CPU chain of
// the default model: a job goes where the routing function says, to another replica when that
// one is full, nowhere when every replica is (429) or none is left (503), and the stats add up.

#include <QtTest>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/model/default_model.h"
#include "engine/model/model.h"
#include "kernels/backend_registry.h"
#include "lan/api/generation_queue.h"
#include "lan/api/replica_router.h"

using namespace shoal;
using namespace shoal::api;

namespace {

std::string modelPath() {
  const std::string p = std::string(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(p)) return p;
  return model::defaultModelPath();
}

// One replica: a backend and a one-slot chain of the whole model.
struct Replica {
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Chain> chain;
  std::unique_ptr<GenerationQueue> queue;
};

}  // namespace

class TestReplicaRouter : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;

  Replica replica(size_t maxWaiting) {
    Replica r;
    kernels::BackendOptions bo;
    bo.cpuThreads = 1;
    r.backend = kernels::createBackend("cpu", bo);
    runtime::StageSpec spec;
    spec.lastLayer = m_model->config().nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 256;
    spec.maxSequences = 1;
    runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(r.backend->createStage("cpu0", src, spec));
    r.chain = std::make_unique<runtime::Chain>(std::move(stages));
    r.queue = std::make_unique<GenerationQueue>(*r.chain, m_model->tokenizer(), maxWaiting);
    return r;
  }

  std::shared_ptr<GenerationJob> job(int32_t tokens) {
    runtime::GenerateOptions g;
    g.maxTokens = tokens;
    g.sampler.temperature = 0;
    g.ignoreEndOfGeneration = true;
    return std::make_shared<GenerationJob>(
        m_model->tokenizer().encode("Once upon a time", true, false), g);
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(modelPath())) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(modelPath());
  }

  void routesWhereTheFunctionSaysAndSpillsOverOnlyWhenFull() {
    Replica a = replica(1);
    Replica b = replica(1);
    std::vector<size_t> choice{1};
    std::vector<QueueStats> seen;
    ReplicaRouter router({a.queue.get(), b.queue.get()}, [&](const std::vector<QueueStats>& s) {
      seen = s;
      return choice;
    });
    QCOMPARE(router.slotCount(), size_t(2));
    QCOMPARE(router.maxWaiting(), size_t(2));
    QCOMPARE(router.contextLength(), 256);

    auto first = job(4);
    QCOMPARE(router.submit(first), JobSink::Submit::Accepted);
    QCOMPARE(seen.size(), size_t(2));
    first->waitFinished();
    QVERIFY(first->error().empty());
    QCOMPARE(router.routed(), (std::vector<uint64_t>{0, 1}));

    // Replica 0 takes one running and one waiting job; a third spills over to replica 1 (the
    // route's second choice), a fourth waits there, and a fifth finds both full.
    choice = {0, 1};
    std::vector<std::shared_ptr<GenerationJob>> held;
    for (int i = 0; i < 4; ++i) {
      held.push_back(job(200));
      QCOMPARE(router.submit(held.back()), JobSink::Submit::Accepted);
      // A replica's first job must have left its waiting place for a slot before the next one
      // comes (else the next finds the queue full and spills over early).
      if (i == 0 || i == 2) {
        const GenerationQueue& q = i == 0 ? *a.queue : *b.queue;
        QTRY_COMPARE_WITH_TIMEOUT(q.stats().running, size_t(1), 30000);
      }
    }
    QCOMPARE(router.routed(), (std::vector<uint64_t>{2, 3}));
    QCOMPARE(router.submit(job(4)), JobSink::Submit::Full);
    QCOMPARE(router.stats().rejected, uint64_t(1));
    // A route that names only the full replica 0 gets no spill-over.
    choice = {0};
    QCOMPARE(router.submit(job(4)), JobSink::Submit::Full);
    QCOMPARE(router.routed(), (std::vector<uint64_t>{2, 3}));
    // The loads the function saw last: replica 0 full (one running or about to, one waiting).
    QCOMPARE(seen[0].holding, size_t(2));
    QCOMPARE(seen[1].holding, size_t(2));

    for (const auto& j : held) j->cancel();
    for (const auto& j : held) j->waitFinished();
    const QueueStats s = router.stats();
    QCOMPARE(s.slotCount, size_t(2));
    QCOMPARE(s.completed, uint64_t(1));
    QVERIFY(s.generatedTokens >= 4);
    QCOMPARE(router.replicaStats().size(), size_t(2));
  }

  void noReplicaLeftIsUnavailable() {
    Replica a = replica(1);
    ReplicaRouter router({a.queue.get()},
                         [](const std::vector<QueueStats>&) { return std::vector<size_t>{}; });
    QCOMPARE(router.submit(job(4)), JobSink::Submit::Unavailable);
    QCOMPARE(router.routed(), (std::vector<uint64_t>{0}));
  }

  void aShutDownReplicaIsSkipped() {
    Replica a = replica(1);
    Replica b = replica(1);
    a.queue->shutdown();
    ReplicaRouter router({a.queue.get(), b.queue.get()}, [](const std::vector<QueueStats>&) {
      return std::vector<size_t>{0, 1};
    });
    auto j = job(2);
    QCOMPARE(router.submit(j), JobSink::Submit::Accepted);
    j->waitFinished();
    QCOMPARE(router.routed(), (std::vector<uint64_t>{0, 1}));
    b.queue->shutdown();
    QCOMPARE(router.submit(job(2)), JobSink::Submit::ShuttingDown);
  }
};

QTEST_GUILESS_MAIN(TestReplicaRouter)
#include "test_replica_router.moc"
