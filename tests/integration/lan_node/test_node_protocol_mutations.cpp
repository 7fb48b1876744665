// A trusted coordinator that sends garbage: valid node-protocol requests (every op, with a real
// model's stages loaded) mutated at random, field by field (removed, or replaced by a value of
// another type or at a limit), blobs cut, grown or filled with random bytes. Every request must
// get its reply (an error for what it refuses) or none where the protocol sends none
// (weights_chunk), the node must go on serving, and nothing may crash: the ASan + UBSan build
// runs this test too. Each request passes through the wire format first (encodeFrame and
// FrameDecoder), so the node sees exactly what a peer could send.
//
// The seed and the number of requests are fixed, so a failure repeats; SHOAL_MUTATION_SEED and
// SHOAL_MUTATION_ROUNDS explore further (e.g. 20000 rounds, a few minutes).

#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/model/model.h"
#include "lan/pool/sha256.h"
#include "lan/transport/wire_format.h"
#include "tests/integration/lan_node/json_mutator.h"
#include "tests/integration/lan_node/node_test_support.h"
#include "tests/integration/lan_node/test_node.h"

using namespace shoal;
using namespace shoal::lan;
using nlohmann::json;

namespace {

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

template <class T>
std::vector<uint8_t> bytesOf(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Replies the node may send; anything else is a finding.
const std::set<std::string> kReplyOps = {
    "error",       "ok",           "pong",           "node_info",    "telemetry",
    "stage_ready", "need_weights", "forward_result", "link_accepted"};

}  // namespace

class TestNodeProtocolMutations : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  std::unique_ptr<model::Model> m_model;
  std::string m_sha;

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(defaultModel())) QSKIP("default model not downloaded");
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-node-mutations-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir / "models");
    std::filesystem::create_directories(m_dir / "config");
    std::filesystem::create_symlink(defaultModel(), m_dir / "models" / "smollm2.gguf");
    m_model = model::Model::load(defaultModel());
    m_sha = sha256FileHex(defaultModel());
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void mutatedRequestsGetRepliesAndTheNodeKeepsServing() {
    const model::ModelConfig& cfg = m_model->config();
    const int64_t rounds = test::envInt("SHOAL_MUTATION_ROUNDS", 3000);
    const auto seed = uint64_t(test::envInt("SHOAL_MUTATION_SEED", 20261207));
    test::Mutator mut(seed);
    test::TestNode node("alpha", m_dir / "config", m_dir / "models");
    auto conn = node.connect();

    gguf::Writer metaWriter;
    for (const auto& kv : m_model->file().metadata()) metaWriter.set(kv.key, kv.value);
    const std::vector<uint8_t> meta = metaWriter.toBytes();
    const std::string unknownSha(64, 'a');
    const json modelRef = {{"sha256", m_sha}, {"name", "m"}, {"size", m_model->file().fileSize()}};
    const int32_t last = cfg.nLayer;
    auto load = [&](const char* id, int first, int end, bool emb, bool head) {
      return json{{"op", "load_stage"},   {"stage_id", id},       {"model", modelRef},
                  {"device", "cpu0"},     {"first_layer", first}, {"last_layer", end},
                  {"has_embedding", emb}, {"has_head", head},     {"context_length", 32},
                  {"max_sequences", 2},   {"max_batch", 4}};
    };
    auto ids = [&](int n) {
      std::vector<int32_t> v;
      for (int i = 0; i < n; ++i) v.push_back(mut.pick(int(cfg.nVocab)));
      return bytesOf(v);
    };
    auto hidden = [&](int n) {
      std::vector<float> v(size_t(n) * size_t(cfg.nEmbd));
      for (float& x : v) x = float(mut.pick(2000) - 1000) / 1000.0f;
      return bytesOf(v);
    };
    const json sample = {{"temperature", 0.7}, {"top_k", 40}, {"top_p", 0.9}, {"seed", 7}};

    // The valid requests the mutations start from. The four stages (emb, mid, head, whole) are
    // reloaded now and then (templates of their own), so that forwards usually find them.
    constexpr int kTemplatesForwarding = 5;  // templates 6-10
    struct Request {
      json control;
      std::vector<uint8_t> blob;
    };
    // Where each (stage, sequence) goes on, as the replies so far say: a sequence's positions
    // must follow on, so most forwards start there (the rest anywhere).
    std::map<std::string, int> nextPosition;
    auto keyOf = [](const json& stage, const json& seq) { return stage.dump() + "/" + seq.dump(); };
    const char* forwardStage[kTemplatesForwarding] = {"emb", "mid", "head", "head", "whole"};
    // A forward of one segment; the templates add their own fields.
    auto forward = [](const char* stage, int seq, int pos, int count, const char* logits,
                      json sampling) {
      return json{{"op", "forward"},
                  {"stage_id", stage},
                  {"sequence", seq},
                  {"first_position", pos},
                  {"count", count},
                  {"logits", logits},
                  {"sample", std::move(sampling)}};
    };
    auto makeRequest = [&](int which) -> Request {
      const int seq = mut.pick(2), count = 1 + mut.pick(4);
      int pos = mut.pick(24);
      if (which >= 6 && which <= 10 && mut.chance(80)) {
        pos = nextPosition[keyOf(forwardStage[which - 6], seq)];
      }
      switch (which) {
        case 0:
          return {{{"op", "node_info"}}, {}};
        case 1:
          return {{{"op", "telemetry"}}, {}};
        case 2:
          return {{{"op", "bandwidth_probe"}}, std::vector<uint8_t>(size_t(mut.pick(512)))};
        case 3:
          return {load("emb", 0, 2, true, false), {}};
        case 4:
          return {load("mid", 2, 4, false, false), {}};
        case 5:
          return {load("head", last - 2, last, false, true), {}};
        case 6:
          return {forward("emb", seq, pos, count, "none", nullptr), ids(count)};
        case 7:
          return {forward("mid", seq, pos, count, "none", nullptr), hidden(count)};
        case 8:
          return {forward("head", seq, pos, count, "last", mut.chance(50) ? sample : json()),
                  hidden(count)};
        case 9: {  // a batch of two sequences' segments
          json first = forward("head", 0, pos, 1, "all", sample);
          json second = forward("head", 1, mut.pick(24), 2, "last", nullptr);
          second["decode_order"] = true;
          return {{{"op", "forward"},
                   {"stage_id", "head"},
                   {"segments", {first, second}},
                   {"sample", nullptr}},
                  hidden(3)};
        }
        case 10: {  // decode ahead: a stage with the embedding and the head
          json c = forward("whole", seq, pos, 1, "last", sample);
          c["decode_ahead"] = 1 + mut.pick(4);
          return {c, ids(1)};
        }
        case 11:
          return {{{"op", "truncate"},
                   {"stage_id", forwardStage[mut.pick(kTemplatesForwarding)]},
                   {"sequence", seq},
                   {"from_position", mut.chance(50) ? 0 : pos}},
                  {}};
        case 12:
          return {{{"op", "unload_stage"}, {"stage_id", "mid"}}, {}};
        case 13: {  // a stream for a model the node lacks: need_weights, then chunks
          json c = load("stream", 0, 1, false, false);
          c["model"]["sha256"] = unknownSha;
          return {c, meta};
        }
        case 14: {
          std::vector<uint8_t> blob(size_t(cfg.nEmbd) * 4, 0);
          return {{{"op", "weights_chunk"},
                   {"stage_id", "stream"},
                   {"tensor", "blk.0.attn_norm.weight"},
                   {"offset", 0},
                   {"total", blob.size()},
                   {"type", 0},
                   {"dims", {cfg.nEmbd}},
                   {"sha256", unknownSha}},
                  blob};
        }
        case 15:
          return {{{"op", "weights_done"}, {"stage_id", "stream"}}, {}};
        case 16:
          return {{{"op", "link_accept"}, {"stage_id", "mid"}, {"from_device", "ID-beta"}}, {}};
        case 17:  // refused: this node has no link connector (and the test opens no socket)
          return {{{"op", "link_connect"},
                   {"stage_id", "mid"},
                   {"address", "127.0.0.1:9"},
                   {"device_id", "ID-beta"},
                   {"route", 1}},
                  {}};
        case 18: {  // from its link: nothing was pushed, so it waits link_wait_ms and fails
          json c = forward("mid", 0, pos, 1, "none", nullptr);
          c["from_link"] = true;
          c["link_wait_ms"] = 5;
          return {c, {}};
        }
        case 19:
          return {load("whole", 0, last, true, true), {}};
        default: {  // to its link: refused, the stage has none
          json c = forward("mid", 0, pos, 1, "none", nullptr);
          c["to_link"] = true;
          return {c, hidden(1)};
        }
      }
    };
    constexpr int kTemplates = 21;
    const int kLoads[] = {3, 4, 5, 19};  // drawn more often: a failed load unloads its stage

    int64_t sent = 0, errors = 0, unencodable = 0;
    std::map<std::string, int> replies;
    for (int64_t round = 0; round < rounds; ++round) {
      const int draw = mut.pick(kTemplates + 8);
      const int which = draw < kTemplates ? draw : kLoads[(draw - kTemplates) % 4];
      Request r = makeRequest(which);
      // A quarter of the requests (and most of the stages' loads) stay valid, so that forwards
      // reach the engine; a sequence's positions must follow on, so forwards often start at 0.
      const bool isLoad = which == 19 || (which >= 3 && which <= 5);
      if (mut.chance(isLoad ? 30 : 75)) {
        const int n = 1 + mut.pick(3);
        for (int i = 0; i < n; ++i) mut.mutate(r.control);
        if (mut.chance(30)) mut.mutateBlob(r.blob);
      }
      // A mutation may turn a plain forward into one from a link: keep its wait short (the
      // default is 30 s), which is the one field the test does not let it choose.
      if (const auto it = r.control.find("from_link"); it != r.control.end() && it->is_boolean()) {
        r.control["link_wait_ms"] = 5;
      }
      const int64_t id = (int64_t{1} << 40) + round;
      r.control["id"] = id;
      Message m;
      m.control = r.control;
      m.blob = std::move(r.blob);
      // Through the wire format, as a peer's bytes would arrive.
      std::vector<uint8_t> frame;
      try {
        frame = encodeFrame(m);
      } catch (const TransportError&) {
        ++unencodable;
        continue;
      }
      FrameDecoder decoder;
      decoder.feed(frame);
      std::optional<Message> decoded = decoder.next();
      QVERIFY(decoded.has_value());
      conn->send(*decoded);
      ++sent;
      // A ping after it: the node answers in order, so its pong closes this round's replies.
      const int64_t pingId = -id;
      conn->send(Message{{{"op", "ping"}, {"id", pingId}, {"t", round}}, {}});
      for (;;) {
        Message reply;
        try {
          reply = conn->receive(std::chrono::seconds(60));
        } catch (const TransportError& e) {
          QFAIL(qPrintable(QString("round %1 (%2): no reply: %3; request %4")
                               .arg(round)
                               .arg(QString::fromStdString(m.control.value("op", "")))
                               .arg(e.what())
                               .arg(QString::fromStdString(m.control.dump().substr(0, 400)))));
        }
        const std::string op = reply.control.value("op", "");
        const int64_t rid = reply.control.value("id", json()).is_number_integer()
                                ? reply.control["id"].get<int64_t>()
                                : 0;
        if (rid == pingId) {
          QCOMPARE(op, std::string("pong"));
          break;
        }
        QVERIFY2(kReplyOps.count(op) == 1,
                 qPrintable(QString::fromStdString(reply.control.dump())));
        ++replies[op];
        // (value(): the request may lack any of these; operator[] of a const json must not.)
        const json& c = m.control;
        const json stage = c.value("stage_id", json()), seqField = c.value("sequence", json());
        const json first = c.value("first_position", json()), n = c.value("count", json());
        if (op == "stage_ready") {
          for (int s = 0; s < 2; ++s) nextPosition.erase(keyOf(stage, s));
        } else if (op == "forward_result" && first.is_number_integer() && n.is_number_integer() &&
                   seqField.is_number_integer()) {
          nextPosition[keyOf(stage, seqField)] = first.get<int>() + n.get<int>();
        } else if (op == "ok" && c.value("op", "") == "truncate" &&
                   reply.control.contains("kept")) {
          nextPosition[keyOf(stage, seqField)] = reply.control["kept"].get<int>();
        }
        if (op == "error") {
          ++errors;
          if (std::getenv("SHOAL_MUTATION_VERBOSE"))
            qInfo("%s -> %s", m.control.dump().substr(0, 200).c_str(),
                  reply.control.value("message", "").c_str());
          // A clear message: it names what was wrong, not a JSON library's type error.
          const std::string message = reply.control.value("message", "");
          QVERIFY2(!message.empty() && message.find("json.exception") == std::string::npos,
                   qPrintable(QString::fromStdString(m.control.dump().substr(0, 300) + " -> " +
                                                     reply.control.dump())));
        }
      }
    }
    QVERIFY(node.host().stageCount() <= kMaxStagesPerConnection);

    // Still serving, correctly: on a new connection (the old one may hold its limit of stages
    // under mutated ids), a fresh stage loads and a token goes through it.
    auto fresh = node.connect();
    const Message ready = test::rawCall(*fresh, load("final", 0, 2, true, false));
    QVERIFY2(ready.control.value("op", "") == "stage_ready",
             qPrintable(QString::fromStdString(ready.control.dump())));
    const Message out = test::rawCall(*fresh,
                                      {{"op", "forward"},
                                       {"stage_id", "final"},
                                       {"sequence", 0},
                                       {"first_position", 0},
                                       {"count", 1},
                                       {"logits", "none"},
                                       {"sample", nullptr}},
                                      bytesOf(std::vector<int32_t>{1}));
    QCOMPARE(out.control.value("op", ""), std::string("forward_result"));
    QCOMPARE(out.blob.size(), size_t(cfg.nEmbd) * 4);

    std::string summary;
    for (const auto& [op, n] : replies) summary += op + " " + std::to_string(n) + ", ";
    qInfo("seed %llu: %lld requests sent (%lld not encodable), %lld errors; replies: %s",
          static_cast<unsigned long long>(seed), static_cast<long long>(sent),
          static_cast<long long>(unencodable), static_cast<long long>(errors), summary.c_str());
    // The mutations must not all be refused at the door: some requests reach the engine.
    QVERIFY(replies["forward_result"] > 0);
    QVERIFY(replies["stage_ready"] > 0);
  }

  // What the mutations found: fields of another JSON type were read with json::value, whose
  // type_error named neither the op nor the field, and a float where an integer belongs was
  // converted without a range check (1e300 into an int: undefined behaviour).
  void fieldsOfTheWrongTypeAreNamedInTheError() {
    const model::ModelConfig& cfg = m_model->config();
    test::TestNode node("alpha", m_dir / "config-types", m_dir / "models");
    auto conn = node.connect();
    const json modelRef = {{"sha256", m_sha}, {"name", "m"}, {"size", m_model->file().fileSize()}};
    json head = {{"op", "load_stage"},
                 {"stage_id", "head"},
                 {"model", modelRef},
                 {"device", "cpu0"},
                 {"first_layer", cfg.nLayer - 1},
                 {"last_layer", cfg.nLayer},
                 {"has_embedding", false},
                 {"has_head", true},
                 {"context_length", 16},
                 {"max_sequences", 1},
                 {"max_batch", 1}};
    QCOMPARE(test::rawCall(*conn, head).control.value("op", ""), std::string("stage_ready"));
    const std::vector<float> row(size_t(cfg.nEmbd), 0.01f);
    const auto refusal = [&](const json& request, std::vector<uint8_t> blob = {}) {
      const Message r = test::rawCall(*conn, request, std::move(blob));
      return r.control.value("op", "") == "error" ? r.control.value("message", "") : "";
    };
    for (const auto& [field, value, says] :
         {std::tuple{"top_k", json(1e300), "'sample.top_k' must be a 32-bit integer"},
          {"top_k", json(uint64_t{1} << 40), "'sample.top_k' must be a 32-bit integer"},
          {"temperature", json("hot"), "'sample.temperature' must be a finite number"},
          {"top_p", json(1e300), "'sample.top_p' must be a finite number"},
          {"seed", json(-1), "'sample.seed' must be a non-negative integer"}}) {
      json sample = {{"temperature", 0.5}};
      sample[field] = value;
      const std::string message = refusal({{"op", "forward"},
                                           {"stage_id", "head"},
                                           {"sequence", 0},
                                           {"first_position", 0},
                                           {"count", 1},
                                           {"sample", sample}},
                                          bytesOf(row));
      QVERIFY2(message.find(says) != std::string::npos, message.c_str());
    }
    json badDevice = head;
    badDevice["device"] = 7;
    QVERIFY(refusal(badDevice).find("load_stage: field 'device' is not a string") !=
            std::string::npos);
    QVERIFY(refusal({{"op", "link_accept"}, {"stage_id", "head"}, {"from_device", json::object()}})
                .find("link_accept: field 'from_device' is not a string") != std::string::npos);

    // A stream's chunk with a negative offset.
    gguf::Writer meta;
    for (const auto& kv : m_model->file().metadata()) meta.set(kv.key, kv.value);
    json stream = head;
    stream["stage_id"] = "stream";
    stream["model"]["sha256"] = std::string(64, 'b');
    const Message need = test::rawCall(*conn, stream, meta.toBytes());
    QCOMPARE(need.control.value("op", ""), std::string("need_weights"));
    const std::string message = refusal({{"op", "weights_chunk"},
                                         {"stage_id", "stream"},
                                         {"tensor", need.control["tensors"][0]},
                                         {"offset", -1},
                                         {"total", 16},
                                         {"type", 0},
                                         {"dims", {4}},
                                         {"sha256", std::string(64, '0')}},
                                        std::vector<uint8_t>(16));
    QVERIFY2(message.find("weights_chunk: field 'offset' missing or not a non-negative integer") !=
                 std::string::npos,
             message.c_str());
  }
};

QTEST_GUILESS_MAIN(TestNodeProtocolMutations)
#include "test_node_protocol_mutations.moc"
