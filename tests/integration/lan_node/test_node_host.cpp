// The node protocol end to end in one process: NodeHosts (the shoal-node stage host) serving
// RemoteStages (the coordinator's proxies) over in-memory connections. A model split over three
// nodes generates exactly what one local stage generates; weights stream to a node that lacks
// the model and come from its shard cache on the next start; bad requests get error replies.

#include <QtTest>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "engine/error.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/sampler.h"
#include "kernels/cpu/cpu_backend.h"
#include "lan/node/node_host.h"
#include "lan/pool/coordinator.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/sha256.h"
#include "tests/integration/lan_node/memory_connection.h"
#include "tests/integration/lan_node/node_test_support.h"
#include "tests/integration/lan_node/test_node.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

constexpr int kThreads = 1;  // the same everywhere, so sums are taken in the same order
constexpr int kSteps = 64;

// prefix + k (built with append: GCC 12 misreports -Wrestrict on "literal" + std::string).
std::string named(const char* prefix, int k) {
  return std::string(prefix).append(std::to_string(k));
}

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The CPU backend reporting only `freeBytes` free: a node whose memory is mostly taken, without
// filling this machine's.
class LowMemoryCpu final : public runtime::Backend {
 public:
  explicit LowMemoryCpu(uint64_t freeBytes) : m_cpu(kThreads), m_free(freeBytes) {}
  std::string name() const override { return m_cpu.name(); }
  runtime::Availability availability() const override { return m_cpu.availability(); }
  std::vector<runtime::DeviceInfo> devices() const override {
    auto devices = m_cpu.devices();
    for (auto& d : devices) d.memoryFree = m_free;
    return devices;
  }
  std::unique_ptr<runtime::Stage> createStage(const std::string& deviceId,
                                              const runtime::ModelSource& model,
                                              const runtime::StageSpec& spec) override {
    return m_cpu.createStage(deviceId, model, spec);
  }

 private:
  cpu::CpuBackend m_cpu;
  uint64_t m_free;
};

using test::TestNode;

// Greedy continuation of `prompt` by one local stage holding the whole model.
std::vector<int32_t> localGreedy(const model::Model& m, const std::vector<int32_t>& prompt) {
  return test::localGreedy(m, prompt, kSteps, kThreads, 256).tokens;
}

// The same through remote stages, this test relaying as the coordinator does.
std::vector<int32_t> remoteGreedy(std::vector<std::unique_ptr<RemoteStage>>& stages,
                                  const std::vector<int32_t>& prompt) {
  return test::remoteGreedy(stages, prompt, kSteps).tokens;
}

std::vector<std::unique_ptr<RemoteStage>> deployThree(std::vector<std::unique_ptr<TestNode>>& nodes,
                                                      const model::Model& m,
                                                      const std::string& sha) {
  std::vector<std::shared_ptr<NodeClient>> clients;
  for (auto& n : nodes) clients.push_back(n->client());
  return test::deploySplit(clients, m, sha, "stage");
}

Message call(Connection& c, nlohmann::json control, std::vector<uint8_t> blob = {}) {
  return test::rawCall(c, std::move(control), std::move(blob));
}

std::string opOf(const Message& m) { return m.control.value("op", ""); }
bool says(const Message& m, const std::string& text) {
  return m.control.value("message", "").find(text) != std::string::npos;
}

// load_stage of hidden-to-hidden layers [first, last) of a model the node has on disk; one token
// per forward and one sequence keep each stage small.
nlohmann::json loadRequest(const std::string& sha, const std::string& stageId, int first, int last,
                           int contextLength = 16) {
  return {{"op", "load_stage"},     {"stage_id", stageId},  {"model", {{"sha256", sha}}},
          {"device", "cpu0"},       {"first_layer", first}, {"last_layer", last},
          {"has_embedding", false}, {"has_head", false},    {"context_length", contextLength},
          {"max_sequences", 1},     {"max_batch", 1}};
}

// One hidden state (every value `x`) through `stageId` at position 0.
Message forwardHidden(Connection& c, const std::string& stageId, int32_t nEmbd, float x = 0.01f) {
  std::vector<float> hidden(size_t(nEmbd), x);
  std::vector<uint8_t> blob(hidden.size() * sizeof(float));
  std::memcpy(blob.data(), hidden.data(), blob.size());
  return call(c,
              {{"op", "forward"},
               {"stage_id", stageId},
               {"sequence", 0},
               {"first_position", 0},
               {"count", 1},
               {"sample", nullptr}},
              std::move(blob));
}

// The f16 K and V a stage of `layers` layers caches for one sequence of `contextLength`.
uint64_t kvBytes(const model::ModelConfig& c, int layers, int contextLength) {
  return uint64_t(layers) * uint64_t(contextLength) * 2 * uint64_t(c.kvDim()) * 2;
}

// One stage of layers [first, last) on `client`.
std::unique_ptr<RemoteStage> deployOne(std::shared_ptr<NodeClient> client, const model::Model& m,
                                       const std::string& sha, const std::string& stageId,
                                       int32_t first, int32_t last, int32_t contextLength,
                                       const WeightsProgress& progress = {}) {
  LoadStageRequest r;
  r.stageId = stageId;
  r.model = {sha, "m", m.file().fileSize()};
  r.placement = {client->peerDeviceId(), "cpu0", first, last, first == 0, false};
  r.contextLength = contextLength;
  return RemoteStage::deploy(std::move(client), m.file(), r, progress);
}

}  // namespace

class TestNodeHost : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  std::filesystem::path m_modelsDir;
  std::unique_ptr<model::Model> m_model;
  std::string m_sha;
  std::vector<std::vector<int32_t>> m_prompts;
  std::vector<uint8_t> m_meta;  // the model's metadata as load_stage's blob (startStream)

  // A load_stage of layer [0, 1) that must stream (the node lacks the model): need_weights, then
  // the stream waits for weights that this test never sends.
  Message startStream(Connection& c, const std::string& stageId) {
    if (m_meta.empty()) {
      gguf::Writer meta;
      for (const auto& kv : m_model->file().metadata()) meta.set(kv.key, kv.value);
      m_meta = meta.toBytes();
    }
    return call(c, loadRequest(m_sha, stageId, 0, 1), m_meta);
  }

  std::filesystem::path dir(const std::string& name) {
    const auto d = m_dir / name;
    std::filesystem::create_directories(d);
    return d;
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(defaultModel())) QSKIP("default model not downloaded");
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-node-host-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    m_modelsDir = dir("models");
    std::filesystem::create_symlink(defaultModel(), m_modelsDir / "smollm2.gguf");
    m_model = model::Model::load(defaultModel());
    m_sha = sha256FileHex(defaultModel());
    for (const char* text : {"The capital of France is",
                             "def fibonacci(n):", "Once upon a time, in a small village,"}) {
      m_prompts.push_back(m_model->tokenizer().encode(text, true, false));
    }
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void nodeInfoReportsDevicesAndHashedModels() {
    TestNode node("alpha", dir("info-config"), m_modelsDir);
    auto c = node.connect();
    const Message r = call(*c, {{"op", "node_info"}});
    QCOMPARE(r.control.value("op", ""), std::string("node_info"));
    QCOMPARE(r.control.value("name", ""), std::string("alpha"));
    QCOMPARE(r.control.value("device_id", ""), std::string("ID-alpha"));
    QCOMPARE(r.control["devices"].size(), size_t(1));
    QCOMPARE(r.control["devices"][0].value("id", ""), std::string("cpu0"));
    QVERIFY(r.control["devices"][0].value("memory_total", uint64_t{0}) > 0);
    QCOMPARE(r.control["models"].size(), size_t(1));
    QCOMPARE(r.control["models"][0].value("sha256", ""), m_sha);
    QCOMPARE(r.control["models"][0].value("size", uint64_t{0}),
             uint64_t(std::filesystem::file_size(defaultModel())));
    // The hash is cached for the next start.
    QVERIFY(std::filesystem::exists(dir("info-config") / "model_hashes.json"));
  }

  void pingEchoesItsTime() {
    TestNode node("alpha", dir("ping-config"), "");
    auto c = node.connect();
    const Message r = call(*c, {{"op", "ping"}, {"t", 12345}});
    QCOMPARE(r.control.value("op", ""), std::string("pong"));
    QCOMPARE(r.control.value("t", 0), 12345);
  }

  void threeNodePipelineGeneratesWhatOneStageGenerates() {
    std::vector<std::unique_ptr<TestNode>> nodes;
    for (int k = 0; k < 3; ++k) {
      nodes.push_back(
          std::make_unique<TestNode>(named("n", k), dir(named("pipe-config-", k)), m_modelsDir));
    }
    auto stages = deployThree(nodes, *m_model, m_sha);
    for (const auto& s : stages) QCOMPARE(s->loaded().source, std::string("local-file"));
    for (const auto& prompt : m_prompts) {
      const auto want = localGreedy(*m_model, prompt);
      const auto got = remoteGreedy(stages, prompt);
      QCOMPARE(got, want);
    }
  }

  void remoteChainReturnsTheSameLogits() {
    std::vector<std::unique_ptr<TestNode>> nodes;
    for (int k = 0; k < 3; ++k) {
      nodes.push_back(
          std::make_unique<TestNode>(named("n", k), dir(named("chain-config-", k)), m_modelsDir));
    }
    auto remote = deployThree(nodes, *m_model, m_sha);
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    for (auto& s : remote) stages.push_back(std::move(s));
    runtime::Chain chain(std::move(stages));

    cpu::CpuBackend cpu(kThreads);
    runtime::StageSpec spec;
    spec.lastLayer = m_model->config().nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 256;
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    std::vector<std::unique_ptr<runtime::Stage>> one;
    one.push_back(cpu.createStage("cpu0", src, spec));
    runtime::Chain local(std::move(one));

    std::vector<float> got, want;
    chain.forward(0, 0, m_prompts[0], got);
    local.forward(0, 0, m_prompts[0], want);
    QCOMPARE(got.size(), size_t(m_model->config().nVocab));
    QVERIFY(got == want);
  }

  void streamedWeightsAreCachedSoASecondStartReceivesNone() {
    const auto emptyModels = dir("no-models");
    std::vector<std::filesystem::path> configs;
    for (int k = 0; k < 3; ++k) configs.push_back(dir(named("stream-config-", k)));
    const auto want = localGreedy(*m_model, m_prompts[0]);
    {
      std::vector<std::unique_ptr<TestNode>> nodes;
      for (int k = 0; k < 3; ++k) {
        nodes.push_back(std::make_unique<TestNode>(named("n", k), configs[size_t(k)], emptyModels));
      }
      auto stages = deployThree(nodes, *m_model, m_sha);
      uint64_t sent = 0;
      for (const auto& s : stages) {
        QCOMPARE(s->loaded().source, std::string("streamed"));
        sent += s->loaded().streamedBytes;
      }
      uint64_t received = 0;
      for (const auto& n : nodes) received += n->host().weightBytesReceived();
      QVERIFY(received > 0);
      QCOMPARE(received, sent);
      QCOMPARE(remoteGreedy(stages, m_prompts[0]), want);
      stages.clear();
    }
    // "Restart": new hosts over the same config directories.
    std::vector<std::unique_ptr<TestNode>> nodes;
    for (int k = 0; k < 3; ++k) {
      nodes.push_back(std::make_unique<TestNode>(named("n", k), configs[size_t(k)], emptyModels));
    }
    // node_info tells the coordinator that streamed them (only it) which ranges are cached.
    int next = 0;
    for (int k = 0; k < 3; ++k) {
      const NodeInfo info =
          parseNodeInfo(call(*nodes[size_t(k)]->connect(), {{"op", "node_info"}}).control);
      QCOMPARE(info.shards.size(), size_t(1));
      QCOMPARE(info.shards[0].model, m_sha);
      QCOMPARE(info.shards[0].firstLayer, next);
      next = info.shards[0].lastLayer;
      QVERIFY(parseNodeInfo(
                  call(*nodes[size_t(k)]->connect("someone-else"), {{"op", "node_info"}}).control)
                  .shards.empty());
    }
    QCOMPARE(next, m_model->config().nLayer);
    auto stages = deployThree(nodes, *m_model, m_sha);
    for (const auto& s : stages) {
      QCOMPARE(s->loaded().source, std::string("shard-cache"));
      QCOMPARE(s->loaded().streamedBytes, uint64_t{0});
    }
    for (const auto& n : nodes) QCOMPARE(n->host().weightBytesReceived(), uint64_t{0});
    QCOMPARE(remoteGreedy(stages, m_prompts[0]), want);
  }

  void streamingReportsProgressUpToTheTotal() {
    TestNode node("alpha", dir("progress-config"), dir("no-models-4"));
    struct Progress {
      uint64_t bytesSent, bytesTotal;
    };
    std::vector<Progress> seen;
    auto stage = deployOne(node.client(), *m_model, m_sha, "p", 0, 3, 16,
                           [&](uint64_t sent, uint64_t total) {
                             seen.push_back({sent, total});
                           });
    QCOMPARE(stage->loaded().source, std::string("streamed"));
    QVERIFY(seen.size() > 1);
    for (size_t i = 1; i < seen.size(); ++i) QVERIFY(seen[i].bytesSent > seen[i - 1].bytesSent);
    QCOMPARE(seen.back().bytesSent, seen.back().bytesTotal);
    QCOMPARE(seen.back().bytesSent, stage->loaded().streamedBytes);
    QCOMPARE(node.host().weightBytesReceived(), stage->loaded().streamedBytes);
  }

  void tensorWithWrongHashIsRefused() {
    TestNode node("alpha", dir("badhash-config"), dir("no-models-2"));
    auto c = node.connect();
    const gguf::File& f = m_model->file();
    gguf::Writer meta;
    for (const auto& kv : f.metadata()) meta.set(kv.key, kv.value);
    const Message need = call(*c,
                              {{"op", "load_stage"},
                               {"stage_id", "x"},
                               {"model", {{"sha256", m_sha}, {"name", "m"}, {"size", 1}}},
                               {"device", "cpu0"},
                               {"first_layer", 0},
                               {"last_layer", 1},
                               {"has_embedding", false},
                               {"has_head", false},
                               {"context_length", 16},
                               {"max_sequences", 1}},
                              meta.toBytes());
    QCOMPARE(need.control.value("op", ""), std::string("need_weights"));
    const std::string first = need.control["tensors"][0].get<std::string>();
    const gguf::TensorInfo* t = f.findTensor(first);
    QVERIFY(t);
    QVERIFY(t->nbytes <= kWeightChunkBytes);
    const Message refused = call(*c,
                                 {{"op", "weights_chunk"},
                                  {"stage_id", "x"},
                                  {"tensor", first},
                                  {"offset", 0},
                                  {"total", t->nbytes},
                                  {"type", uint32_t(t->type)},
                                  {"dims", t->dims},
                                  {"sha256", std::string(64, '0')}},
                                 {t->data, t->data + t->nbytes});
    QCOMPARE(refused.control.value("op", ""), std::string("error"));
    QVERIFY(refused.control.value("message", "").find("SHA-256") != std::string::npos);
    const Message done = call(*c, {{"op", "weights_done"}, {"stage_id", "x"}});
    QCOMPARE(done.control.value("op", ""), std::string("error"));
    QCOMPARE(node.host().stageCount(), size_t(0));
  }

  void forwardWithWrongBlobSizeIsAnErrorAndTheConnectionLives() {
    TestNode node("alpha", dir("badfwd-config"), m_modelsDir);
    auto conn = node.connect();
    auto stage = deployOne(std::make_shared<NodeClient>(conn, std::chrono::seconds(60)), *m_model,
                           m_sha, "only", 0, 2, 16);
    const Message bad = call(*conn,
                             {{"op", "forward"},
                              {"stage_id", "only"},
                              {"sequence", 0},
                              {"first_position", 0},
                              {"count", 2},
                              {"sample", nullptr}},
                             std::vector<uint8_t>(12));
    QCOMPARE(bad.control.value("op", ""), std::string("error"));
    const Message pong = call(*conn, {{"op", "ping"}, {"t", 1}});
    QCOMPARE(pong.control.value("op", ""), std::string("pong"));
  }

  // A forward of several sequences ("segments") runs them as one batch: each segment's rows come
  // back as they do when it is sent alone; malformed segment lists are errors, and the node keeps
  // serving.
  void aForwardOfSeveralSegmentsEqualsEachSegmentAlone() {
    using nlohmann::json;
    TestNode node("alpha", dir("segments-config"), m_modelsDir);
    auto c = node.connect();
    const int32_t nEmbd = m_model->config().nEmbd;
    for (const char* id : {"together", "alone"}) {
      json load = loadRequest(m_sha, id, 1, 3);
      load["max_sequences"] = 2;
      load["max_batch"] = 4;
      QCOMPARE(opOf(call(*c, load)), std::string("stage_ready"));
    }
    std::vector<float> rows(3 * size_t(nEmbd));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.01f * float(i % 97) - 0.4f;
    auto blobOf = [](const float* x, size_t n) {
      std::vector<uint8_t> b(n * sizeof(float));
      std::memcpy(b.data(), x, b.size());
      return b;
    };
    const json segments = json::array({{{"sequence", 0}, {"first_position", 0}, {"count", 2}},
                                       {{"sequence", 1}, {"first_position", 0}, {"count", 1}}});
    const Message together = call(
        *c,
        {{"op", "forward"}, {"stage_id", "together"}, {"segments", segments}, {"sample", nullptr}},
        blobOf(rows.data(), rows.size()));
    QCOMPARE(opOf(together), std::string("forward_result"));
    QCOMPARE(together.control.value("count", 0), 3);
    std::vector<uint8_t> alone;
    for (const auto& [sequence, first, count] :
         {std::tuple{0, size_t(0), size_t(2)}, std::tuple{1, size_t(2), size_t(1)}}) {
      const Message one = call(*c,
                               {{"op", "forward"},
                                {"stage_id", "alone"},
                                {"sequence", sequence},
                                {"first_position", 0},
                                {"count", count},
                                {"sample", nullptr}},
                               blobOf(rows.data() + first * size_t(nEmbd), count * size_t(nEmbd)));
      QCOMPARE(opOf(one), std::string("forward_result"));
      alone.insert(alone.end(), one.blob.begin(), one.blob.end());
    }
    QCOMPARE(together.blob, alone);

    const std::vector<std::pair<const char*, json>> bad = {
        {"not an array", json("all of them")},
        {"no segment", json::array()},
        {"an entry that is not an object", json::array({1, 2})},
        {"a count of 0", json::array({{{"sequence", 0}, {"first_position", 2}, {"count", 0}}})},
        {"more rows than the stage takes",
         json::array({{{"sequence", 0}, {"first_position", 2}, {"count", 3}},
                      {{"sequence", 1}, {"first_position", 1}, {"count", 2}}})},
        {"a sequence beyond the slots",
         json::array({{{"sequence", 2}, {"first_position", 0}, {"count", 1}}})},
        {"one sequence twice",
         json::array({{{"sequence", 1}, {"first_position", 1}, {"count", 1}},
                      {{"sequence", 1}, {"first_position", 1}, {"count", 1}}})},
    };
    for (const auto& [what, list] : bad) {
      const Message r = call(
          *c,
          {{"op", "forward"}, {"stage_id", "together"}, {"segments", list}, {"sample", nullptr}},
          blobOf(rows.data(), size_t(nEmbd)));
      QVERIFY2(opOf(r) == "error", what);
    }
    QCOMPARE(opOf(call(*c, {{"op", "ping"}, {"t", 4}})), std::string("pong"));
  }

  // decode_ahead on a real node: the tokens equal decoding them one per request — greedy
  // against one local stage, sampled against the node's own per-token sampling with the seeds a
  // session gives each position; a shape it cannot run is an error reply, and the node serves on.
  void aNodeDecodesAheadWhatItDecodesTokenByToken() {
    TestNode node("ahead", dir("ahead-config"), m_modelsDir);
    auto client = node.client();
    {
      auto raw = node.connect();
      QVERIFY(
          parseNodeInfo(call(*raw, {{"op", "node_info"}}).control).hasFeature(kFeatureDecodeAhead));
    }
    const int32_t layers = m_model->config().nLayer;
    LoadStageRequest r;
    r.stageId = "whole";
    r.model = {m_sha, "m", m_model->file().fileSize()};
    r.placement = {client->peerDeviceId(), "cpu0", 0, layers, true, true};
    r.contextLength = 256;
    std::unique_ptr<RemoteStage> stage = RemoteStage::deploy(client, m_model->file(), r);
    QCOMPARE(stage->decodeAheadLimit(), 0);  // until told the node can
    stage->setDecodeAhead(true);
    QVERIFY(stage->decodeAheadLimit() >= 16);

    const std::vector<int32_t>& prompt = m_prompts[0];
    const auto p = static_cast<int32_t>(prompt.size());
    runtime::SampleRequest greedy;
    runtime::StageOutput out;
    const runtime::Segment all{0, 0, p, runtime::LogitRows::Last};
    runtime::Batch batch;
    batch.tokens = prompt;
    batch.segments = std::span(&all, 1);
    batch.sample = &greedy;
    stage->forward(batch, out);
    QCOMPARE(out.tokens.size(), size_t(1));
    const std::vector<int32_t> want = localGreedy(*m_model, prompt);
    QCOMPARE(out.tokens[0], want[0]);
    const std::vector<int32_t> ahead = stage->decodeAhead(0, p, out.tokens[0], 16, greedy);
    QCOMPARE(ahead, std::vector<int32_t>(want.begin() + 1, want.begin() + 17));
    QCOMPARE(stage->cachedPositions(0), p + 16);

    // Sampled: one request of 12 against 12 requests of one, seeded as a session seeds them.
    runtime::SampleRequest sampled;
    sampled.temperature = 0.9f;
    sampled.topK = 40;
    sampled.topP = 0.95f;
    sampled.seed = 77;
    stage->truncate(0, p);
    const std::vector<int32_t> burst = stage->decodeAhead(0, p, want[0], 12, sampled);
    stage->truncate(0, p);
    std::vector<int32_t> single;
    int32_t token = want[0];
    for (int32_t j = 0; j < 12; ++j) {
      runtime::SampleRequest one = sampled;
      one.seed = sampled.seed + uint64_t(j);
      const runtime::Segment seg{0, p + j, 1, runtime::LogitRows::Last};
      runtime::Batch b;
      b.tokens = std::span(&token, 1);
      b.segments = std::span(&seg, 1);
      b.sample = &one;
      stage->forward(b, out);
      token = out.tokens.at(0);
      single.push_back(token);
    }
    QCOMPARE(burst, single);

    // Refused: more tokens than the most, and a stage without both ends; the node serves on.
    QVERIFY_THROWS_EXCEPTION(Error, stage->decodeAhead(0, p, want[0], 1000, greedy));
    auto c = node.connect();
    QCOMPARE(opOf(call(*c, loadRequest(m_sha, "middle", 1, 2))), std::string("stage_ready"));
    const nlohmann::json bad = {{"op", "forward"},     {"stage_id", "middle"}, {"sequence", 0},
                                {"first_position", 0}, {"count", 1},           {"sample", nullptr},
                                {"decode_ahead", 4}};
    QVERIFY(says(call(*c, bad, std::vector<uint8_t>(size_t(m_model->config().nEmbd) * 4, 0)),
                 "embedding and the head"));
    QCOMPARE(opOf(call(*c, {{"op", "ping"}, {"t", 1}})), std::string("pong"));
  }

  // Two sequences in one forward, each with its own sampling request (kFeatureSegmentSample):
  // each token is the one a forward of that sequence alone with its request draws.
  void eachSegmentIsSampledWithItsOwnRequest() {
    TestNode node("segment-sample", dir("segment-sample-config"), m_modelsDir);
    auto client = node.client();
    {
      auto raw = node.connect();
      QVERIFY(parseNodeInfo(call(*raw, {{"op", "node_info"}}).control)
                  .hasFeature(kFeatureSegmentSample));
    }
    LoadStageRequest r;
    r.stageId = "two";
    r.model = {m_sha, "m", m_model->file().fileSize()};
    r.placement = {client->peerDeviceId(), "cpu0", 0, m_model->config().nLayer, true, true};
    r.contextLength = 256;
    r.maxSequences = 2;
    std::unique_ptr<RemoteStage> stage = RemoteStage::deploy(client, m_model->file(), r);
    stage->setSegmentSample(true);
    const std::vector<int32_t>& a = m_prompts[0];
    const std::vector<int32_t>& b = m_prompts[1];
    runtime::StageOutput out;
    runtime::SampleRequest warm[2];
    for (int i = 0; i < 2; ++i) {
      warm[i].temperature = 0.9f;
      warm[i].topK = 0;
      warm[i].seed = 500 + uint64_t(i);
    }
    // Both prompts alone, then their next tokens: together (one request each), and alone.
    auto prefill = [&] {
      for (int32_t s = 0; s < 2; ++s) {
        const std::vector<int32_t>& p = s == 0 ? a : b;
        const runtime::Segment seg{s, 0, int32_t(p.size()), runtime::LogitRows::Last};
        runtime::Batch one;
        one.tokens = p;
        one.segments = std::span(&seg, 1);
        stage->forward(one, out);
      }
    };
    const int32_t next[] = {42, 43};
    const runtime::Segment steps[] = {{0, int32_t(a.size()), 1, runtime::LogitRows::Last},
                                      {1, int32_t(b.size()), 1, runtime::LogitRows::Last}};
    prefill();
    runtime::Batch both;
    both.tokens = next;
    both.segments = steps;
    both.samples = warm;
    stage->forward(both, out);
    QCOMPARE(out.tokens.size(), size_t(2));
    QVERIFY(out.logits.empty());
    const std::vector<int32_t> together = out.tokens;
    stage->truncate(0, 0);
    stage->truncate(1, 0);
    prefill();
    for (int i = 0; i < 2; ++i) {
      runtime::Batch one;
      one.tokens = std::span(&next[i], 1);
      one.segments = std::span(&steps[i], 1);
      one.sample = &warm[i];
      stage->forward(one, out);
      QCOMPARE(out.tokens.at(0), together[size_t(i)]);
    }
  }

  void malformedRequestsGetErrorRepliesAndTheNodeKeepsServing_data() {
    QTest::addColumn<QByteArray>("request");
    QTest::addColumn<QByteArray>("blob");
    using nlohmann::json;
    const auto row = [](const char* tag, const json& request, QByteArray blob = {}) {
      QTest::newRow(tag) << QByteArray::fromStdString(request.dump()) << blob;
    };
    const auto load = [](std::string sha, std::string device, int first, int last) {
      return json{{"op", "load_stage"},   {"stage_id", "s"},      {"model", {{"sha256", sha}}},
                  {"device", device},     {"first_layer", first}, {"last_layer", last},
                  {"context_length", 16}, {"max_sequences", 1}};
    };
    const std::string zeros(64, '0');
    row("unknown op", {{"op", "launch_missiles"}});
    row("forward to no stage",
        {{"op", "forward"},
         {"stage_id", "nope"},
         {"sequence", 0},
         {"first_position", 0},
         {"count", 1},
         {"sample", nullptr}},
        QByteArray(4, 0));
    row("stage_id of wrong type", {{"op", "truncate"},
                                   {"stage_id", json::array({1})},
                                   {"sequence", 0},
                                   {"from_position", 0}});
    row("chunk without a pending stage",
        {{"op", "weights_chunk"}, {"stage_id", "s"}, {"tensor", "x"}, {"offset", 0}, {"total", 4}},
        QByteArray(4, 1));
    row("done without a pending stage", {{"op", "weights_done"}, {"stage_id", "s"}});
    row("unknown model without metadata", load(zeros, "cpu0", 0, 2));
    row("metadata blob that is not GGUF", load(zeros, "cpu0", 0, 2),
        QByteArray("not a gguf file at all"));
    row("sha256 not hex", load("xyz", "cpu0", 0, 2));
    row("unknown device", load(zeros, "gpu9", 0, 2));
    row("last layer before first", load(zeros, "cpu0", 5, 2));
  }

  void malformedRequestsGetErrorRepliesAndTheNodeKeepsServing() {
    QFETCH(QByteArray, request);
    QFETCH(QByteArray, blob);
    TestNode node("alpha", dir("malformed-config"), dir("no-models-3"));
    auto c = node.connect();
    const Message r = call(*c, nlohmann::json::parse(request.toStdString()),
                           std::vector<uint8_t>(blob.begin(), blob.end()));
    QCOMPARE(r.control.value("op", ""), std::string("error"));
    QVERIFY(!r.control.value("message", "").empty());
    QCOMPARE(call(*c, {{"op", "ping"}, {"t", 3}}).control.value("op", ""), std::string("pong"));
  }

  void stageWhoseCacheCannotFitIsRefusedBeforeLoading() {
    TestNode node("alpha", dir("huge-config"), m_modelsDir);
    auto conn = node.connect();
    LoadStageRequest r;
    r.stageId = "huge";
    r.model = {m_sha, "m", m_model->file().fileSize()};
    r.placement = {"node", "cpu0", 0, m_model->config().nLayer, true, true};
    r.contextLength = 1 << 24;
    r.maxSequences = 4096;
    QVERIFY_THROWS_EXCEPTION(
        Error, RemoteStage::deploy(std::make_shared<NodeClient>(conn, std::chrono::seconds(60)),
                                   m_model->file(), r));
    QCOMPARE(node.host().stageCount(), size_t(0));
  }

  // Issue 14 item 9: stages are scoped to the connection (and so the coordinator) that loaded
  // them.
  void anotherCoordinatorCannotForwardOnAStage() {
    TestNode node("alpha", dir("iso-forward-config"), m_modelsDir);
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2))), std::string("stage_ready"));
    const Message refused = forwardHidden(*b, "stage-0", m_model->config().nEmbd);
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "unknown stage"), refused.control.dump().c_str());
    QCOMPARE(opOf(forwardHidden(*a, "stage-0", m_model->config().nEmbd)),
             std::string("forward_result"));
  }

  void anotherCoordinatorCannotTruncateOrUnloadAStage() {
    TestNode node("alpha", dir("iso-unload-config"), m_modelsDir);
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2))), std::string("stage_ready"));
    const Message truncated = call(
        *b, {{"op", "truncate"}, {"stage_id", "stage-0"}, {"sequence", 0}, {"from_position", 0}});
    QCOMPARE(opOf(truncated), std::string("error"));
    QVERIFY(says(truncated, "unknown stage"));
    const Message unloaded = call(*b, {{"op", "unload_stage"}, {"stage_id", "stage-0"}});
    QCOMPARE(opOf(unloaded), std::string("error"));
    QVERIFY(says(unloaded, "unknown stage"));
    QCOMPARE(node.host().stageCount(), size_t(1));
    QCOMPARE(opOf(forwardHidden(*a, "stage-0", m_model->config().nEmbd)),
             std::string("forward_result"));
  }

  void twoCoordinatorsLoadStagesOfTheSameIdIndependently() {
    TestNode node("alpha", dir("iso-same-id-config"), m_modelsDir);
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    const int32_t nEmbd = m_model->config().nEmbd;
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2))), std::string("stage_ready"));
    const Message before = forwardHidden(*a, "stage-0", nEmbd);
    // B's "stage-0" holds other layers: were it A's, A's output would change.
    QCOMPARE(opOf(call(*b, loadRequest(m_sha, "stage-0", 2, 5))), std::string("stage_ready"));
    QCOMPARE(node.host().stageCount(), size_t(2));
    const Message after = forwardHidden(*a, "stage-0", nEmbd);
    QCOMPARE(opOf(after), std::string("forward_result"));
    QVERIFY(after.blob == before.blob);
    const Message other = forwardHidden(*b, "stage-0", nEmbd);
    QCOMPARE(opOf(other), std::string("forward_result"));
    QVERIFY(other.blob != before.blob);
  }

  void closingOneCoordinatorsConnectionLeavesAnothersStageOfTheSameId() {
    TestNode node("alpha", dir("iso-close-config"), m_modelsDir);
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2))), std::string("stage_ready"));
    QCOMPARE(opOf(call(*b, loadRequest(m_sha, "stage-0", 0, 2))), std::string("stage_ready"));
    a->close();  // A's stages unload with its connection, B's stay
    QTRY_COMPARE_WITH_TIMEOUT(node.host().stageCount(), size_t(1), 10000);
    QCOMPARE(opOf(forwardHidden(*b, "stage-0", m_model->config().nEmbd)),
             std::string("forward_result"));
  }

  // Issue 14 item 10: a shard is served from the cache only to the coordinator that streamed
  // (vouched for) it.
  void shardStreamedByOneCoordinatorIsNotServedToAnother() {
    TestNode node("alpha", dir("poison-config"), dir("no-models-poison"));
    // A streams layer 1 with ffn_down zeroed, sending the hash of the zeroes.
    auto a = node.connect("coordinator-A");
    const Message poisoned =
        test::streamStageRaw(*a, m_model->file(), m_sha, "stage-0", 1, 2,
                             [](const std::string& name, std::span<const uint8_t> bytes) {
                               std::vector<uint8_t> v(bytes.begin(), bytes.end());
                               if (name == "blk.1.ffn_down.weight")
                                 std::fill(v.begin(), v.end(), uint8_t{0});
                               return v;
                             });
    QCOMPARE(opOf(poisoned), std::string("stage_ready"));
    // B, with the real file, asks for the same model and layers.
    auto stage = deployOne(node.client("coordinator-B"), *m_model, m_sha, "stage-0", 1, 2, 16);
    QCOMPARE(stage->loaded().source, std::string("streamed"));
    TestNode honest("beta", dir("honest-config"), m_modelsDir);
    auto reference = deployOne(honest.client(), *m_model, m_sha, "stage-0", 1, 2, 16);
    QCOMPARE(reference->loaded().source, std::string("local-file"));
    std::vector<float> hidden(size_t(m_model->config().nEmbd), 0.01f);
    runtime::StageOutput got, want;
    test::forwardHidden(*stage, hidden, 0, got);
    test::forwardHidden(*reference, hidden, 0, want);
    QVERIFY(!want.hidden.empty());
    QVERIFY(got.hidden == want.hidden);
  }

  void coordinatorGetsItsOwnStreamedShardFromTheCache() {
    TestNode node("alpha", dir("own-shard-config"), dir("no-models-own"));
    auto first = deployOne(node.client("coordinator-A"), *m_model, m_sha, "s", 1, 2, 16);
    QCOMPARE(first->loaded().source, std::string("streamed"));
    auto again = deployOne(node.client("coordinator-A"), *m_model, m_sha, "s", 1, 2, 16);
    QCOMPARE(again->loaded().source, std::string("shard-cache"));
  }

  // Issue 14 item 11: memory, stage count and shard cache limits.
  void kvCacheThatOtherStagesLeaveNoRoomForIsRefused() {
    const uint64_t oneStage = kvBytes(m_model->config(), 2, 256);
    TestNode node("alpha", dir("fit-sum-config"), m_modelsDir, 0,
                  std::make_unique<LowMemoryCpu>(oneStage * 3 / 2));
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2, 256))), std::string("stage_ready"));
    const Message refused = call(*b, loadRequest(m_sha, "stage-0", 2, 4, 256));
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "KV cache"), refused.control.dump().c_str());
    QCOMPARE(node.host().stageCount(), size_t(1));
  }

  void memoryOfAnUnloadedStageIsFreeForTheNext() {
    const uint64_t oneStage = kvBytes(m_model->config(), 2, 256);
    TestNode node("alpha", dir("fit-free-config"), m_modelsDir, 0,
                  std::make_unique<LowMemoryCpu>(oneStage * 3 / 2));
    auto a = node.connect("coordinator-A");
    auto b = node.connect("coordinator-B");
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2, 256))), std::string("stage_ready"));
    QCOMPARE(opOf(call(*a, {{"op", "unload_stage"}, {"stage_id", "stage-0"}})), std::string("ok"));
    QCOMPARE(opOf(call(*b, loadRequest(m_sha, "stage-0", 2, 4, 256))), std::string("stage_ready"));
  }

  void nodeInfoReportsTheMemoryItsStagesLeaveFree() {
    const uint64_t free = uint64_t{64} << 20;
    TestNode node("alpha", dir("fit-info-config"), m_modelsDir, 0,
                  std::make_unique<LowMemoryCpu>(free));
    auto a = node.connect();
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "stage-0", 0, 2, 256))), std::string("stage_ready"));
    const Message info = call(*a, {{"op", "node_info"}});
    QCOMPARE(info.control["devices"][0].value("memory_free", uint64_t{0}),
             free - kvBytes(m_model->config(), 2, 256));
  }

  void connectionBeyondItsStageLimitIsRefused() {
    TestNode node("alpha", dir("count-conn-config"), m_modelsDir);
    auto a = node.connect("coordinator-A");
    for (size_t k = 0; k < kMaxStagesPerConnection; ++k) {
      QCOMPARE(opOf(call(*a, loadRequest(m_sha, named("s", int(k)), 0, 1))),
               std::string("stage_ready"));
    }
    const Message refused =
        call(*a, loadRequest(m_sha, named("s", int(kMaxStagesPerConnection)), 0, 1));
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "this connection"), refused.control.dump().c_str());
    // Replacing one of its stages adds none.
    QCOMPARE(opOf(call(*a, loadRequest(m_sha, "s0", 1, 2))), std::string("stage_ready"));
    QCOMPARE(node.host().stageCount(), kMaxStagesPerConnection);
  }

  void coordinatorBeyondItsStageLimitOverConnectionsIsRefused() {
    TestNode node("alpha", dir("count-peer-config"), m_modelsDir);
    std::vector<std::shared_ptr<Connection>> connections;
    size_t loaded = 0;
    while (loaded < kMaxStagesPerPeer) {
      connections.push_back(node.connect("coordinator-A"));
      for (size_t k = 0; k < kMaxStagesPerConnection && loaded < kMaxStagesPerPeer; ++k) {
        QCOMPARE(opOf(call(*connections.back(), loadRequest(m_sha, named("s", int(k)), 0, 1))),
                 std::string("stage_ready"));
        ++loaded;
      }
    }
    const Message refused = call(*node.connect("coordinator-A"), loadRequest(m_sha, "s", 0, 1));
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "coordinator-A"), refused.control.dump().c_str());
    // Another coordinator is still served.
    QCOMPARE(opOf(call(*node.connect("coordinator-B"), loadRequest(m_sha, "s", 0, 1))),
             std::string("stage_ready"));
  }

  void nodeBeyondItsStageLimitIsRefused() {
    TestNode node("alpha", dir("count-node-config"), m_modelsDir);
    std::vector<std::shared_ptr<Connection>> connections;
    for (size_t loaded = 0; loaded < kMaxStagesPerNode;) {
      // Coordinators at their own limit, so that only the node's is left to refuse.
      const std::string peer = named("coordinator-", int(loaded / kMaxStagesPerPeer));
      connections.push_back(node.connect(peer));
      for (size_t k = 0; k < kMaxStagesPerConnection && loaded < kMaxStagesPerNode; ++k, ++loaded) {
        QCOMPARE(opOf(call(*connections.back(), loadRequest(m_sha, named("s", int(k)), 0, 1))),
                 std::string("stage_ready"));
      }
    }
    const Message refused = call(*node.connect("coordinator-new"), loadRequest(m_sha, "s", 0, 1));
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "this node"), refused.control.dump().c_str());
  }

  // Issue 14 review: a load waiting for streamed weights holds a KV claim and cache room like a
  // stage, so it counts toward the stage limits.
  void pendingStreamsCountTowardTheCoordinatorsStageLimit() {
    TestNode node("alpha", dir("pending-peer-config"), dir("no-models-pending-peer"));
    std::vector<std::shared_ptr<Connection>> connections;
    for (size_t k = 0; k < kMaxStagesPerPeer; ++k) {
      connections.push_back(node.connect("coordinator-A"));
      QCOMPARE(opOf(startStream(*connections.back(), "s")), std::string("need_weights"));
    }
    const Message refused = startStream(*node.connect("coordinator-A"), "s");
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "coordinator-A"), refused.control.dump().c_str());
    QCOMPARE(opOf(startStream(*node.connect("coordinator-B"), "s")), std::string("need_weights"));
  }

  void pendingStreamsCountTowardTheNodesStageLimit() {
    TestNode node("alpha", dir("pending-node-config"), dir("no-models-pending-node"));
    std::vector<std::shared_ptr<Connection>> connections;
    for (size_t k = 0; k < kMaxStagesPerNode; ++k) {
      // Coordinators under their own limit, so that only the node's is left to refuse.
      connections.push_back(node.connect(named("coordinator-", int(k / kMaxStagesPerPeer))));
      QCOMPARE(opOf(startStream(*connections.back(), "s")), std::string("need_weights"));
    }
    auto late = node.connect("coordinator-new");
    const Message refused = startStream(*late, "s");
    QCOMPARE(opOf(refused), std::string("error"));
    QVERIFY2(says(refused, "this node"), refused.control.dump().c_str());
    // A dropped stream gives its place back.
    connections.front()->close();
    QTRY_COMPARE_WITH_TIMEOUT(opOf(startStream(*late, "s")), std::string("need_weights"), 10000);
  }

  // Issue 14 review: a node's memory counts every loaded stage, so a replan that moves a node's
  // layers must unload its old stage before loading the new one.
  void replanOnNodesWithRoomForOneStageEachSucceeds() {
    const model::ModelConfig& config = m_model->config();
    const int32_t layers = config.nLayer;
    constexpr int32_t kContext = 256;
    // Each node holds the KV cache of 2/3 of the layers: a stage of either plan, never an old
    // and a new one together.
    const uint64_t free = kvBytes(config, layers * 2 / 3, kContext);
    TestNode a("a", dir("replan-a-config"), m_modelsDir, 0, std::make_unique<LowMemoryCpu>(free));
    TestNode b("b", dir("replan-b-config"), m_modelsDir, 0, std::make_unique<LowMemoryCpu>(free));
    std::map<std::string, TestNode*> byAddress{{"a:7000", &a}, {"b:7000", &b}};
    CoordinatorOptions options;
    options.contextLength = kContext;
    Coordinator coordinator(
        [&](const std::string& address) -> std::unique_ptr<Connection> {
          return byAddress.at(address)->connectOwned();
        },
        options);
    const std::string idA = coordinator.addNode("a:7000");
    const std::string idB = coordinator.addNode("b:7000");
    coordinator.setModel(defaultModel());
    const auto split = [&](int32_t at) {
      const std::vector<StagePlacement> stages{{idA, "cpu0", 0, at, true, false},
                                               {idB, "cpu0", at, layers, false, true}};
      return planOfStages(stages, coordinator.pool());
    };
    coordinator.deploy(split(layers / 2));
    coordinator.deploy(split(layers * 2 / 3));  // both nodes get other layers
    QCOMPARE(coordinator.deployed().front().lastLayer, layers * 2 / 3);
    QCOMPARE(a.host().stageCount(), size_t(1));
    QCOMPARE(b.host().stageCount(), size_t(1));
    runtime::GenerateOptions greedy;
    greedy.maxTokens = 8;
    greedy.sampler.temperature = 0;
    greedy.ignoreEndOfGeneration = true;
    const auto want = test::localGreedy(*m_model, m_prompts[0], 8, kThreads, kContext).tokens;
    QCOMPARE(coordinator.generate(m_prompts[0], greedy).tokens, want);
  }

  void shardOverTheCapIsStreamedBesideOneInUseAndEvictedOnceUnused() {
    // The size of one layer's shard, streamed to a node without a cap.
    uint64_t shardBytes = 0;
    {
      TestNode probe("probe", dir("evict-probe-config"), dir("no-models-evict"));
      auto s = deployOne(probe.client(), *m_model, m_sha, "p", 1, 2, 16);
      shardBytes = probe.host().shardCache().usedBytes();
    }
    QVERIFY(shardBytes > 0);
    // Room for one such shard, not two.
    TestNode node("alpha", dir("evict-config"), dir("no-models-evict"), shardBytes * 3 / 2);
    auto client = node.client("coordinator-A");
    auto one = deployOne(client, *m_model, m_sha, "one", 1, 2, 16);
    QCOMPARE(one->loaded().source, std::string("streamed"));
    const auto onePath = dir("evict-config") / "shards" / "coordinator-A" / m_sha / "1-2.gguf";
    QVERIFY(std::filesystem::exists(onePath));
    // Over the cap beside a shard in use: written all the same (the disk has room), since the
    // stage runs from it; the shard in use stays.
    auto two = deployOne(client, *m_model, m_sha, "two", 2, 3, 16);
    QCOMPARE(two->loaded().source, std::string("streamed"));
    const auto twoPath = dir("evict-config") / "shards" / "coordinator-A" / m_sha / "2-3.gguf";
    QVERIFY(std::filesystem::exists(onePath));
    QVERIFY(std::filesystem::exists(twoPath));
    runtime::StageOutput out;
    std::vector<float> hidden(size_t(m_model->config().nEmbd), 0.01f);
    test::forwardHidden(*one, hidden, 0, out);
    one->unload();
    QVERIFY(!std::filesystem::exists(onePath));  // evicted: unused, and the cache over its cap
    QVERIFY(std::filesystem::exists(twoPath));   // in use
    QVERIFY(node.host().shardCache().usedBytes() <= node.host().shardCache().maxBytes());
  }

  void telemetryReportsTheStageAfterSampling() {
    TestNode node("alpha", dir("telemetry-config"), m_modelsDir);
    auto conn = node.connect();
    auto stage = deployOne(std::make_shared<NodeClient>(conn, std::chrono::seconds(60)), *m_model,
                           m_sha, "t", 3, 7, 16);
    std::vector<float> hidden(size_t(m_model->config().nEmbd), 0.01f);
    runtime::StageOutput out;
    test::forwardHidden(*stage, hidden, 0, out);
    node.host().sampleTelemetry();
    const Message r = call(*conn, {{"op", "telemetry"}});
    const auto devices = r.control["devices"].get<std::vector<DeviceTelemetry>>();
    QCOMPARE(devices.size(), size_t(1));
    QCOMPARE(devices[0].nodeId, std::string("ID-alpha"));
    QCOMPARE(devices[0].firstLayer, 3);
    QCOMPARE(devices[0].lastLayer, 7);
    QVERIFY(devices[0].tokensPerS > 0);
    QVERIFY(devices[0].busyFraction > 0);
    // Four layers' weights and KV cache, not the whole model file.
    QVERIFY(devices[0].memoryUsed > 0);
    QVERIFY(devices[0].memoryUsed < std::filesystem::file_size(defaultModel()));
  }
};

QTEST_GUILESS_MAIN(TestNodeHost)
#include "test_node_host.moc"
