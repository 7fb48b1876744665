// shoal-node as processes on loopback, driven over real TLS connections by this test acting as
// the coordinator: node_info; a model split over three nodes generates exactly what one local
// stage generates; weights stream to nodes without the model and a restarted node serves them
// from its shard cache (0 bytes received); a client the node does not trust gets a refusal.
// Direct forwarding (lan/node/stage_links.h): nodes linked by the coordinator pass hidden states
// to each other and generate the same tokens, a long prompt's micro-batches in flight at once; a
// device a coordinator introduced gets nothing but its link into the one stage, and nothing once
// that stage is unloaded. The ring: with the head's node linked back to the first node, a burst
// decoded ahead over the three nodes gives the token-by-token tokens, greedy and sampled.

#include <QProcess>
#include <QRegularExpression>
#include <QtTest>
#include <cstring>
#include <filesystem>

#include "engine/error.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/runtime/decode_ahead.h"
#include "lan/node/shard_cache.h"
#include "lan/pool/forward_fields.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/sha256.h"
#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/pairing.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/lan_node/node_process.h"
#include "tests/integration/lan_node/node_test_support.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

constexpr int kThreads = 1;  // the same in the nodes (node_process.h) and the local reference
constexpr int kSteps = 64;

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

QString runToString(const QStringList& args) {
  QProcess p;
  p.start(SHOAL_NODE_EXE, args);
  p.waitForFinished(60000);
  return QString::fromUtf8(p.readAllStandardOutput()).trimmed();
}

// A shoal-node process (node_process.h) that trusts `trust` and serves the GGUF files of
// `modelsDir` (none when empty).
QStringList nodeArgs(const std::filesystem::path& modelsDir, const std::string& trust,
                     const QStringList& extra) {
  QStringList args{"--trust", QString::fromStdString(trust)};
  if (!modelsDir.empty()) args << "--models-dir" << QString::fromStdString(modelsDir.string());
  return args + extra;
}
class NodeProcess : public test::NodeProcess {
 public:
  NodeProcess(const std::filesystem::path& configDir, const std::filesystem::path& modelsDir,
              const std::string& trust, const QStringList& extra = {})
      : test::NodeProcess(SHOAL_NODE_EXE, configDir, nodeArgs(modelsDir, trust, extra)) {}
};

Message call(Connection& c, nlohmann::json control) { return test::rawCall(c, std::move(control)); }

std::vector<int32_t> localGreedy(const model::Model& m, const std::vector<int32_t>& prompt) {
  return test::localGreedy(m, prompt, kSteps, kThreads, 256).tokens;
}

std::vector<int32_t> remoteGreedy(std::vector<std::unique_ptr<RemoteStage>>& stages,
                                  const std::vector<int32_t>& prompt) {
  return test::remoteGreedy(stages, prompt, kSteps).tokens;
}

// A link connection of `peer` (an introduced device) on `route`, as a node opens one
// (lan/node/stage_links.h); throws unless the node answers link_ready.
std::unique_ptr<Connection> openLink(uint16_t port, const Identity& peer, const TrustStore& trust,
                                     const std::string& route) {
  auto link = connectTo("127.0.0.1", port, peer, trust, std::chrono::seconds(30));
  Message hello;
  hello.control = {{"op", "link_hello"}, {"route", route}};
  link->send(hello);
  const Message answer = link->receive(std::chrono::seconds(10));
  if (answer.control.value("op", "") != "link_ready") {
    throw Error("link refused: " + answer.control.dump());
  }
  return link;
}

// A lying coordinator's stream: layer 1's ffn_down zeroed (it sends the hash of the zeroes).
std::vector<uint8_t> zeroFfnDown(const std::string& name, std::span<const uint8_t> bytes) {
  std::vector<uint8_t> v(bytes.begin(), bytes.end());
  if (name == "blk.1.ffn_down.weight") std::fill(v.begin(), v.end(), uint8_t{0});
  return v;
}

// Layer 1 of the model streamed by `client` (RemoteStage, as the coordinator deploys it).
std::unique_ptr<RemoteStage> deployLayerOne(std::shared_ptr<NodeClient> client,
                                            const model::Model& m, const std::string& sha) {
  LoadStageRequest r;
  r.stageId = "stage-0";
  r.model = {sha, "model.gguf", m.file().fileSize()};
  r.placement = {client->peerDeviceId(), "cpu0", 1, 2, false, false};
  r.contextLength = 16;
  return RemoteStage::deploy(std::move(client), m.file(), r);
}

}  // namespace

class TestNodeProcesses : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  std::filesystem::path m_modelsDir;
  std::unique_ptr<model::Model> m_model;
  std::string m_sha;
  Identity m_client;
  std::vector<std::vector<int32_t>> m_prompts;

  std::filesystem::path dir(const std::string& name) {
    const auto d = m_dir / name;
    std::filesystem::create_directories(d);
    return d;
  }

  // Shard files in the shard cache of the node at `configDir`.
  static size_t shardFiles(const std::filesystem::path& configDir) {
    size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(configDir / "shards", ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      n += it->path().extension() == ".gguf";
    }
    return n;
  }

  // Three nodes' config dirs, with the node IDs (from --print-device-id) in `trust`.
  std::vector<std::filesystem::path> configs(const std::string& prefix, TrustStore& trust) {
    std::vector<std::filesystem::path> out;
    for (int k = 0; k < 3; ++k) {
      out.push_back(dir(prefix + char('0' + k)));
      const QString id = runToString(
          {"--print-device-id", "--config-dir", QString::fromStdString(out.back().string())});
      trust.add(id.toStdString(), prefix + char('0' + k));
    }
    return out;
  }

  // Three node processes (configs(prefix)) trusting this test, and a client of each.
  void startThree(const std::string& prefix, TrustStore& trust,
                  std::vector<std::unique_ptr<NodeProcess>>& nodes,
                  std::vector<std::shared_ptr<NodeClient>>& clients) {
    for (const auto& c : configs(prefix, trust)) {
      nodes.push_back(std::make_unique<NodeProcess>(c, m_modelsDir, m_client.deviceId));
    }
    for (auto& node : nodes) {
      clients.push_back(std::make_shared<NodeClient>(
          connectTo("127.0.0.1", node->port(), m_client, trust, std::chrono::seconds(30)),
          std::chrono::seconds(60)));
    }
  }

  // `from` reports (node_info's links) one open link of this test's stages, to `to`.
  void checkOneOpenLink(NodeProcess& from, const TrustStore& trust, NodeProcess& to) {
    const nlohmann::json info =
        call(*connectTo("127.0.0.1", from.port(), m_client, trust, std::chrono::seconds(30)),
             {{"op", "node_info"}})
            .control;
    QVERIFY2(info.contains("links") && info["links"].size() == 1, info.dump().c_str());
    QCOMPARE(info["links"][0].value("to_device", ""), to.deviceId());
    QCOMPARE(info["links"][0].value("open", false), true);
  }

  std::vector<std::unique_ptr<RemoteStage>> deploy(std::vector<std::unique_ptr<NodeProcess>>& nodes,
                                                   const TrustStore& trust) {
    std::vector<std::shared_ptr<NodeClient>> clients;
    for (auto& node : nodes) {
      clients.push_back(std::make_shared<NodeClient>(
          connectTo("127.0.0.1", node->port(), m_client, trust, std::chrono::seconds(30)),
          std::chrono::seconds(60)));
    }
    return test::deploySplit(clients, *m_model, m_sha, "stage");
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(defaultModel())) QSKIP("default model not downloaded");
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-node-proc-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    m_modelsDir = dir("models");
    std::filesystem::create_symlink(defaultModel(), m_modelsDir / "smollm2.gguf");
    m_model = model::Model::load(defaultModel());
    m_sha = sha256FileHex(defaultModel());
    m_client = createIdentity();
    for (const char* text : {"The capital of France is", "def fibonacci(n):"}) {
      m_prompts.push_back(m_model->tokenizer().encode(text, true, false));
    }
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void printDeviceIdIsStable() {
    const QString cfg = QString::fromStdString(dir("stable").string());
    const QString a = runToString({"--print-device-id", "--config-dir", cfg});
    QVERIFY(!a.isEmpty());
    QCOMPARE(runToString({"--print-device-id", "--config-dir", cfg}), a);
  }

  void nodeInfoOverTls() {
    TrustStore trust;
    const auto cfg = configs("info", trust);
    NodeProcess node(cfg[0], m_modelsDir, m_client.deviceId);
    QVERIFY(node.port() != 0);
    QVERIFY(trust.isTrusted(node.deviceId()));
    auto c = connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30));
    const Message r = call(*c, {{"op", "node_info"}});
    QCOMPARE(r.control.value("op", ""), std::string("node_info"));
    QCOMPARE(r.control.value("device_id", ""), node.deviceId());
    QCOMPARE(r.control["devices"][0].value("id", ""), std::string("cpu0"));
    // Measured at start (device_profile.h), so the planner gets this CPU's figures.
    QVERIFY(r.control["devices"][0].value("bandwidth_bytes_per_s", 0.0) > 0);
    QVERIFY(r.control["devices"][0].value("flops_per_s", 0.0) > 0);
    QVERIFY(std::filesystem::exists(cfg[0] / "device_profiles.json"));
    QCOMPARE(r.control["models"][0].value("sha256", ""), m_sha);
  }

  void threeProcessPipelineGeneratesWhatOneStageGenerates() {
    TrustStore trust;
    const auto cfg = configs("pipe", trust);
    std::vector<std::unique_ptr<NodeProcess>> nodes;
    for (const auto& c : cfg) {
      nodes.push_back(std::make_unique<NodeProcess>(c, m_modelsDir, m_client.deviceId));
    }
    auto stages = deploy(nodes, trust);
    for (const auto& s : stages) QCOMPARE(s->loaded().source, std::string("local-file"));
    for (const auto& prompt : m_prompts) {
      const auto got = remoteGreedy(stages, prompt);
      QCOMPARE(got, localGreedy(*m_model, prompt));
    }
    qInfo("pooled greedy: %s",
          m_model->tokenizer().decode(remoteGreedy(stages, m_prompts[0])).c_str());
  }

  // Issue 20 item 1: each node sends its hidden states straight to the next one. The greedy
  // tokens equal one local stage's, for prompts shorter and longer than a forward's batch (the
  // latter go as several micro-batches in flight through the linked nodes at once).
  void linkedNodesForwardDirectlyAndGenerateWhatOneStageGenerates() {
    TrustStore trust;
    std::vector<std::unique_ptr<NodeProcess>> nodes;
    std::vector<std::shared_ptr<NodeClient>> clients;
    startThree("linked", trust, nodes, clients);
    auto stages = test::deploySplit(clients, *m_model, m_sha, "stage", 256, {}, 16);
    try {
      for (size_t k = 0; k + 1 < stages.size(); ++k) {
        const std::string route =
            clients[k + 1]->linkAccept(stages[k + 1]->stageId(), nodes[k]->deviceId());
        const double rttS = clients[k]->linkConnect(
            stages[k]->stageId(), "127.0.0.1:" + std::to_string(nodes[k + 1]->port()),
            nodes[k + 1]->deviceId(), route);
        // The node measured its link's round trip (loopback: well under a second).
        QVERIFY2(rttS > 0 && rttS < 1, std::to_string(rttS).c_str());
      }
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    std::vector<int32_t> longPrompt;
    while (longPrompt.size() < 40) {
      longPrompt.insert(longPrompt.end(), m_prompts[0].begin(), m_prompts[0].end());
    }
    // Prompts within one forward equal one local stage; the long one, cut into micro-batches of
    // 16, equals the same micro-batches relayed by the caller.
    for (const auto& prompt : {m_prompts[0], m_prompts[1], longPrompt}) {
      const auto direct = test::remoteGreedy(stages, prompt, kSteps, true).tokens;
      const auto relayed = test::remoteGreedy(stages, prompt, kSteps, false).tokens;
      QCOMPARE(direct, relayed);
      if (prompt.size() <= 16) QCOMPARE(direct, localGreedy(*m_model, prompt));
    }
    // The nodes report their links (what `shoal-cli pool status` prints).
    checkOneOpenLink(*nodes[0], trust, *nodes[1]);
  }

  // Issue 20: the ring. Stage 2's node (the head) is linked back to stage 0's node, so a burst of
  // one-token forwards sent to all three nodes at once decodes ahead (LinkedStages::decodeAhead)
  // with each token going head -> first directly. Bursts of several sizes in a row (the last
  // token of each is not pushed round) give exactly the token-by-token greedy reply; a sampled
  // burst gives the tokens the same chain draws one forward at a time with the same seeds.
  void ringDecodesAheadOverThreeNodesAsTokenByToken() {
    TrustStore trust;
    std::vector<std::unique_ptr<NodeProcess>> nodes;
    std::vector<std::shared_ptr<NodeClient>> clients;
    startThree("ring", trust, nodes, clients);
    for (const auto& client : clients) QVERIFY(client->info().hasFeature(kFeatureDecodeRing));
    auto deployed = test::deploySplit(clients, *m_model, m_sha, "stage");
    std::vector<std::shared_ptr<RemoteStage>> parts;
    for (auto& s : deployed) parts.emplace_back(s.get(), [](RemoteStage*) {});  // `deployed` owns
    auto address = [&](size_t k) { return "127.0.0.1:" + std::to_string(nodes[k]->port()); };
    try {
      for (size_t k = 0; k < 3; ++k) {
        const size_t to = (k + 1) % 3;  // 2 -> 0 closes the ring
        const std::string route =
            clients[to]->linkAccept(parts[to]->stageId(), nodes[k]->deviceId());
        clients[k]->linkConnect(parts[k]->stageId(), address(to), nodes[to]->deviceId(), route);
      }
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    auto group = std::make_shared<LinkedStages>(parts);
    QCOMPARE(group->decodeAheadLimit(), 0);  // not before it is told of the ring
    group->setRing(true);
    QCOMPARE(group->decodeAheadLimit(), runtime::kMaxDecodeAhead);
    runtime::Chain chain({group});

    const std::vector<int32_t>& prompt = m_prompts[0];
    const auto pos0 = static_cast<int32_t>(prompt.size());
    runtime::StageOutput out;
    const runtime::SampleRequest greedy;
    chain.truncate(0, 0);
    chain.forward(0, 0, prompt, out, runtime::LogitRows::Last, &greedy);
    QCOMPARE(out.tokens.size(), size_t(1));
    std::vector<int32_t> ring{out.tokens.front()};
    for (int32_t burst : {1, 5, 20, 37}) {
      const int32_t at = pos0 + int32_t(ring.size()) - 1;
      const std::vector<int32_t> more = chain.decodeAhead(0, at, ring.back(), burst, greedy);
      QCOMPARE(more.size(), size_t(burst));
      ring.insert(ring.end(), more.begin(), more.end());
    }
    QCOMPARE(int(ring.size()), kSteps);
    QCOMPARE(ring, localGreedy(*m_model, prompt));

    // Sampled: each draw j of a burst seeded seed + j, as a forward per token seeds it.
    runtime::SampleRequest sample;
    sample.temperature = 0.9f;
    sample.topK = 40;
    sample.seed = 1234;
    const int32_t t0 = ring.front();
    chain.truncate(0, pos0);
    const std::vector<int32_t> burst = chain.decodeAhead(0, pos0, t0, 24, sample);
    chain.truncate(0, pos0);
    std::vector<int32_t> oneByOne;
    int32_t token = t0;
    for (int32_t j = 0; j < 24; ++j) {
      runtime::SampleRequest draw = sample;
      draw.seed = sample.seed + uint64_t(j);
      const int32_t one[1] = {token};
      chain.forward(0, pos0 + j, one, out, runtime::LogitRows::Last, &draw);
      QCOMPARE(out.tokens.size(), size_t(1));
      token = out.tokens.front();
      oneByOne.push_back(token);
    }
    QCOMPARE(burst, oneByOne);
    QVERIFY(burst != std::vector<int32_t>(ring.begin() + 1, ring.begin() + 25));  // really sampled

    // The head's node reports its link back to the first node.
    checkOneOpenLink(*nodes[2], trust, *nodes[0]);
  }

  // What an introduced device may push into a first stage's ring inbox: token ids inside the
  // vocabulary, as link_tokens. An id outside it, or hidden states, drop the link, and the
  // stage's next forward from the ring is a link failure.
  void aRingLinkCarriesOnlyTokenIdsOfTheVocabulary() {
    TrustStore trust;
    const auto cfg = configs("ringin", trust);
    NodeProcess node(cfg[0], m_modelsDir, m_client.deviceId);
    const Identity peer = createIdentity();  // the head's node
    auto client = std::make_shared<NodeClient>(
        connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30)),
        std::chrono::seconds(60));
    LoadStageRequest r;
    r.stageId = "first";
    r.model = {m_sha, "model.gguf", m_model->file().fileSize()};
    r.placement = {client->peerDeviceId(), "cpu0", 0, 1, true, false};
    r.contextLength = 16;
    auto stage = RemoteStage::deploy(client, m_model->file(), r);
    QVERIFY(stage->spec().hasEmbedding);
    const runtime::SampleRequest* none = nullptr;
    const runtime::Segment at0{0, 0, 1, runtime::LogitRows::None};
    const runtime::Segment at1{0, 1, 1, runtime::LogitRows::None};
    runtime::StageOutput got;
    auto fromRing = [&](const runtime::Segment& segment) {
      runtime::Batch b;
      b.segments = std::span(&segment, 1);
      b.sample = none;
      stage->wait(stage->submitInRing(b, got, true, false));
    };
    for (const auto& [op, blob] : std::vector<std::pair<std::string, std::vector<int32_t>>>{
             {"link_tokens", {m_model->config().nVocab}}, {"link_hidden", {0}}}) {
      auto link =
          openLink(node.port(), peer, trust, client->linkAccept(stage->stageId(), peer.deviceId));
      auto push = [&](const std::string& what, int32_t position, int32_t id) {
        Message m;
        m.control = {{"op", what}, {"sequence", 0}, {"first_position", position}, {"count", 1}};
        m.blob.resize(4);
        std::memcpy(m.blob.data(), &id, 4);
        link->send(m);
      };
      // A good id first: the stage computes on it.
      push("link_tokens", 0, 1);
      stage->truncate(0, 0);
      fromRing(at0);
      QCOMPARE(got.hidden.size(), size_t(m_model->config().nEmbd));
      push(op, 1, blob.front());
      QVERIFY_THROWS_EXCEPTION(TransportError, link->receive(std::chrono::seconds(10)));
      QVERIFY_THROWS_EXCEPTION(LinkFailure, fromRing(at1));
    }
  }

  // A device a trusted coordinator introduced (link_accept) is welcomed by the listener, but may
  // only push hidden states into that one stage: any other request closes its connection, a
  // route not its own is refused, a malformed push drops the link (the coordinator's forward then
  // fails as a link failure, so it relays), and once the stage is unloaded it is a stranger again.
  void anIntroducedDeviceGetsOnlyItsLinkAndOnlyWhileTheStageLives() {
    TrustStore trust;
    const auto cfg = configs("introduced", trust);
    NodeProcess node(cfg[0], m_modelsDir, m_client.deviceId);
    const Identity peer = createIdentity();  // the previous stage's node
    const auto strangerConnects = [&] {
      try {
        connectTo("127.0.0.1", node.port(), peer, trust, std::chrono::seconds(30));
        return true;
      } catch (const TransportError&) {
        return false;
      }
    };
    QVERIFY(!strangerConnects());

    auto client = std::make_shared<NodeClient>(
        connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30)),
        std::chrono::seconds(60));
    auto stage = deployLayerOne(client, *m_model, m_sha);
    const std::string route = client->linkAccept(stage->stageId(), peer.deviceId);
    QVERIFY(!route.empty());

    // Welcomed now, but anything other than its link closes the connection unanswered.
    {
      auto c = connectTo("127.0.0.1", node.port(), peer, trust, std::chrono::seconds(30));
      Message m;
      m.control = {{"op", "node_info"}, {"id", 1}};
      c->send(m);
      QVERIFY_THROWS_EXCEPTION(TransportError, c->receive(std::chrono::seconds(10)));
    }
    // A route that is not its own.
    {
      auto c = connectTo("127.0.0.1", node.port(), peer, trust, std::chrono::seconds(30));
      Message m;
      m.control = {{"op", "link_hello"}, {"route", std::string(32, 'a')}};
      c->send(m);
      QCOMPARE(c->receive(std::chrono::seconds(10)).control.value("op", ""), std::string("error"));
    }
    // Its route: the rows it pushes are what the stage computes on.
    const int32_t nEmbd = m_model->config().nEmbd;
    std::vector<float> hidden(size_t(nEmbd), 0.01f);
    auto link = openLink(node.port(), peer, trust, route);
    {
      Message rows;
      rows.control = {{"op", "link_hidden"}, {"sequence", 0}, {"first_position", 0}, {"count", 1}};
      rows.blob.resize(hidden.size() * sizeof(float));
      std::memcpy(rows.blob.data(), hidden.data(), rows.blob.size());
      link->send(rows);
    }
    stage->setLinks(true, false);
    runtime::StageOutput got, want;
    test::forwardHidden(*stage, {}, 0, got);
    cpu::CpuBackend cpu(kThreads);
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    auto reference = cpu.createStage("cpu0", src, stage->spec());
    test::forwardHidden(*reference, hidden, 0, want);
    QVERIFY(!want.hidden.empty());
    QVERIFY(got.hidden == want.hidden);

    // A push of the wrong size drops the link; the stage's next forward is a link failure.
    {
      Message bad;
      bad.control = {{"op", "link_hidden"}, {"sequence", 0}, {"first_position", 1}, {"count", 1}};
      bad.blob.resize(12);
      link->send(bad);
      QVERIFY_THROWS_EXCEPTION(TransportError, link->receive(std::chrono::seconds(10)));
    }
    QVERIFY_THROWS_EXCEPTION(LinkFailure, test::forwardHidden(*stage, {}, 1, got));

    // Unloaded: the route is revoked and the device is a stranger again.
    stage->unload();
    QVERIFY(!strangerConnects());
    // The node still serves its coordinator.
    QCOMPARE(call(*connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30)),
                  {{"op", "ping"}, {"t", 5}})
                 .control.value("op", ""),
             std::string("pong"));
  }

  void streamedWeightsAreCachedSoARestartedNodeReceivesNone() {
    TrustStore trust;
    const auto cfg = configs("stream", trust);
    const auto want = localGreedy(*m_model, m_prompts[0]);
    {
      std::vector<std::unique_ptr<NodeProcess>> nodes;
      for (const auto& c : cfg) {
        nodes.push_back(std::make_unique<NodeProcess>(c, "", m_client.deviceId));
      }
      auto stages = deploy(nodes, trust);
      for (const auto& s : stages) {
        QCOMPARE(s->loaded().source, std::string("streamed"));
        QVERIFY(s->loaded().streamedBytes > 0);
      }
      QCOMPARE(remoteGreedy(stages, m_prompts[0]), want);
      stages.clear();
      for (auto& n : nodes) QCOMPARE(n->exitCodeAfterStop(), 0);
    }
    std::vector<std::unique_ptr<NodeProcess>> nodes;
    for (const auto& c : cfg) {
      nodes.push_back(std::make_unique<NodeProcess>(c, "", m_client.deviceId));
    }
    auto stages = deploy(nodes, trust);
    for (const auto& s : stages) {
      QCOMPARE(s->loaded().source, std::string("shard-cache"));
      QCOMPARE(s->loaded().streamedBytes, uint64_t{0});
    }
    for (auto& n : nodes) {
      auto c = connectTo("127.0.0.1", n->port(), m_client, trust, std::chrono::seconds(30));
      QCOMPARE(call(*c, {{"op", "node_info"}}).control.value("weight_bytes_received", -1), 0);
    }
    QCOMPARE(remoteGreedy(stages, m_prompts[0]), want);
  }

  // Issue 14 items 9 and 10 between two trusted coordinators (two identities) over TLS: B can
  // neither use A's stage nor get the shard A streamed (with poisoned weights) from the cache.
  void coordinatorsShareNeitherStagesNorStreamedShards() {
    TrustStore trust;
    const auto cfg = configs("isolation", trust);
    const Identity other = createIdentity();
    NodeProcess node(cfg[0], "", m_client.deviceId,
                     {"--trust", QString::fromStdString(other.deviceId)});
    auto a = connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30));
    std::shared_ptr<Connection> b =
        connectTo("127.0.0.1", node.port(), other, trust, std::chrono::seconds(30));
    QCOMPARE(test::streamStageRaw(*a, m_model->file(), m_sha, "stage-0", 1, 2, zeroFfnDown)
                 .control.value("op", ""),
             std::string("stage_ready"));
    const int32_t nEmbd = m_model->config().nEmbd;
    std::vector<float> hidden(size_t(nEmbd), 0.01f);
    std::vector<uint8_t> blob(hidden.size() * sizeof(float));
    std::memcpy(blob.data(), hidden.data(), blob.size());
    const Message refused = test::rawCall(*b,
                                          {{"op", "forward"},
                                           {"stage_id", "stage-0"},
                                           {"sequence", 0},
                                           {"first_position", 0},
                                           {"count", 1},
                                           {"sample", nullptr}},
                                          blob);
    QCOMPARE(refused.control.value("op", ""), std::string("error"));
    QVERIFY(refused.control.value("message", "").find("unknown stage") != std::string::npos);

    auto stage =
        deployLayerOne(std::make_shared<NodeClient>(b, std::chrono::seconds(60)), *m_model, m_sha);
    QCOMPARE(stage->loaded().source, std::string("streamed"));
    // What the real layer computes: a local CPU stage with the same spec.
    cpu::CpuBackend cpu(kThreads);
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    auto reference = cpu.createStage("cpu0", src, stage->spec());
    runtime::StageOutput got, want;
    test::forwardHidden(*stage, hidden, 0, got);
    test::forwardHidden(*reference, hidden, 0, want);
    QVERIFY(!want.hidden.empty());
    QVERIFY(got.hidden == want.hidden);
  }

  // Issue 14 item 11 and its review: --shard-cache-max-gb caps what the cache keeps, but a
  // shard is the file its stage runs from, so a stream over the cap loads while the disk has
  // room, and leaves the cache when its stage unloads.
  void streamLargerThanTheShardCacheCapLoadsAndIsEvictedAfterUnload() {
    TrustStore trust;
    const auto cfg = configs("cachecap", trust);
    NodeProcess node(cfg[0], "", m_client.deviceId, {"--shard-cache-max-gb", "0.001"});
    std::shared_ptr<Connection> c =
        connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30));
    auto client = std::make_shared<NodeClient>(c, std::chrono::seconds(60));
    auto stage = deployLayerOne(client, *m_model, m_sha);  // about 2.5 MB over a 1 MiB cap
    QCOMPARE(stage->loaded().source, std::string("streamed"));
    QCOMPARE(shardFiles(cfg[0]), size_t(1));
    stage->unload();
    QCOMPARE(shardFiles(cfg[0]), size_t(0));
    QCOMPARE(call(*c, {{"op", "ping"}, {"t", 4}}).control.value("op", ""), std::string("pong"));
  }

  void streamLargerThanTheFreeDiskIsRefused() {
    TrustStore trust;
    const auto cfg = configs("diskfull", trust);
    NodeProcess node(cfg[0], "", m_client.deviceId, {"--shard-cache-max-gb", "0.001"});
    std::shared_ptr<Connection> c =
        connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30));
    gguf::Writer meta;
    for (const auto& kv : m_model->file().metadata()) meta.set(kv.key, kv.value);
    const Message need = test::rawCall(*c,
                                       {{"op", "load_stage"},
                                        {"stage_id", "s"},
                                        {"model", {{"sha256", m_sha}}},
                                        {"device", "cpu0"},
                                        {"first_layer", 1},
                                        {"last_layer", 2},
                                        {"context_length", 16},
                                        {"max_sequences", 1}},
                                       meta.toBytes());
    QCOMPARE(need.control.value("op", ""), std::string("need_weights"));
    // An f32 tensor of `rows` rows of 1 GiB: more than the disk has room for, within the 1 TiB
    // a stream may announce.
    const uint64_t gib = uint64_t{1} << 30;
    const uint64_t rows = ShardCache::diskRoomBytes(cfg[0]) / gib + 2;
    if (rows * gib > (uint64_t{1} << 40)) QSKIP("the disk has more room than a stream may use");
    const Message refused = test::rawCall(*c,
                                          {{"op", "weights_chunk"},
                                           {"stage_id", "s"},
                                           {"tensor", need.control["tensors"][0]},
                                           {"offset", 0},
                                           {"total", rows * gib},
                                           {"type", 0},
                                           {"dims", {gib / 4, rows}},
                                           {"sha256", std::string(64, '0')}},
                                          std::vector<uint8_t>(16));
    QCOMPARE(refused.control.value("op", ""), std::string("error"));
    QVERIFY2(refused.control.value("message", "").find("disk") != std::string::npos,
             refused.control.dump().c_str());
    const Message done = call(*c, {{"op", "weights_done"}, {"stage_id", "s"}});
    QCOMPARE(done.control.value("op", ""), std::string("error"));
    QCOMPARE(shardFiles(cfg[0]), size_t(0));
    QCOMPARE(call(*c, {{"op", "ping"}, {"t", 4}}).control.value("op", ""), std::string("pong"));
  }

  void pairingWithThePrintedCodeMakesBothSidesTrusted() {
    TrustStore none;
    const auto cfg = configs("pair", none);
    // The node trusts nobody: --trust names an unrelated identity.
    NodeProcess node(cfg[0], "", createIdentity().deviceId, {"--pair"});
    static const QRegularExpression codeLine("pairing code (\\S+)");
    QString out = node.stdoutText();
    for (int i = 0; i < 10 && !codeLine.match(out).hasMatch(); ++i) out = node.stdoutText(3000);
    QVERIFY2(codeLine.match(out).hasMatch(), qPrintable(out));
    const std::string code = codeLine.match(out).captured(1).toStdString();

    const Identity me = createIdentity();
    TrustStore mine;
    QCOMPARE(pairWith("127.0.0.1", node.port(), me, mine, code, "test-coordinator"),
             node.deviceId());
    QVERIFY(mine.isTrusted(node.deviceId()));
    auto c = connectTo("127.0.0.1", node.port(), me, mine, std::chrono::seconds(30));
    QCOMPARE(call(*c, {{"op", "ping"}, {"t", 9}}).control.value("t", 0), 9);
    // The node saved us in its trusted.json.
    QVERIFY(std::filesystem::exists(cfg[0] / "trusted.json"));

    // The code is spent; SIGUSR1 shows a new one, with which a second device pairs, no restart.
    const Identity second = createIdentity();
    TrustStore theirs;
    const qsizetype seen = out.size();
    node.signal(SIGUSR1);
    QString newCode;
    for (int i = 0; i < 20 && newCode.isEmpty(); ++i) {
      out = node.stdoutText(500);
      const auto m = codeLine.match(out.mid(seen));
      if (m.hasMatch()) newCode = m.captured(1);
    }
    QVERIFY2(!newCode.isEmpty(), qPrintable(out));
    QVERIFY(newCode.toStdString() != code);
    QCOMPARE(pairWith("127.0.0.1", node.port(), second, theirs, newCode.toStdString(), "second"),
             node.deviceId());
  }

  void untrustedClientIsRefused() {
    TrustStore trust;
    const auto cfg = configs("untrusted", trust);
    NodeProcess node(cfg[0], m_modelsDir, m_client.deviceId);
    const Identity stranger = createIdentity();
    try {
      connectTo("127.0.0.1", node.port(), stranger, trust, std::chrono::seconds(30));
      QFAIL("an untrusted client was given a connection");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Auth);
    }
    // The node still serves its trusted coordinator.
    auto c = connectTo("127.0.0.1", node.port(), m_client, trust, std::chrono::seconds(30));
    QCOMPARE(call(*c, {{"op", "ping"}, {"t", 5}}).control.value("op", ""), std::string("pong"));
  }
};

QTEST_GUILESS_MAIN(TestNodeProcesses)
#include "test_node_processes.moc"
