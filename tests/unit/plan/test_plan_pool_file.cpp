// Pool files: a valid file parses to the values it states; every kind of mistake is an error
// that names the field; writing and reading back gives the same pool.

#include <QtTest>

#include "engine/error.h"
#include "engine/plan/pool_file.h"

using namespace shoal::plan;

namespace {

const char* kValid = R"({
  "comment": "two machines",
  "model": {"layers": 32, "layer_weight_bytes": 1.3e8, "layer_flops_per_token": 4.4e8,
            "kv_bytes_per_token_per_layer": 4096, "hidden_bytes_per_token": 16384,
            "embed_bytes": 2.9e8, "head_bytes": 4.3e8, "head_flops_per_token": 1.05e9},
  "request": {"context_tokens": 8192, "sequences": 2},
  "devices": [
    {"id": "pc-4090", "node": "pc", "memory_bytes": 22e9, "bandwidth_bytes_per_s": 1.0e12,
     "flops_per_s": 1.65e14},
    {"id": "mac", "node": "mac", "memory_bytes": 48e9, "bandwidth_bytes_per_s": 4e11,
     "flops_per_s": 1.4e13}
  ],
  "links": [{"nodes": ["pc", "mac"], "latency_s": 2e-4, "bandwidth_bytes_per_s": 1.25e8}],
  "intra_node": {"latency_s": 1e-5, "bandwidth_bytes_per_s": 2.5e10}
})";

// The error text of parsing `json`, or "" when it parses.
std::string errorOf(const std::string& json, bool requireModel = true) {
  try {
    parsePoolFile(json, requireModel);
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return "";
}

// kValid with one piece of text replaced.
std::string with(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  Q_ASSERT(at != std::string::npos);
  s.replace(at, from.size(), to);
  return s;
}

}  // namespace

class PlanPoolFileTest : public QObject {
  Q_OBJECT

 private slots:
  void parsesEveryField() {
    const PoolFile f = parsePoolFile(kValid, true);
    QVERIFY(f.model.has_value());
    QCOMPARE(f.model->layers, 32);
    QCOMPARE(f.model->layerWeightBytes, 1.3e8);
    QCOMPARE(f.model->headFlopsPerToken, 1.05e9);
    QCOMPARE(f.request.contextTokens, int64_t{8192});
    QCOMPARE(f.request.sequences, int64_t{2});
    QCOMPARE(f.pool.devices.size(), size_t{2});
    QCOMPARE(f.pool.devices[1].id, std::string("mac"));
    QCOMPARE(f.pool.devices[1].memoryBytes, 48e9);
    QCOMPARE(f.pool.links.size(), size_t{1});
    QCOMPARE(f.pool.links[0].link.latencyS, 2e-4);
    QCOMPARE(f.pool.intraNode.bandwidthBytesPerS, 2.5e10);
    QVERIFY(!f.pool.defaultLink);
  }

  void requestAndIntraNodeHaveDefaults() {
    const std::string s = R"({"devices": [{"id": "a", "node": "n", "memory_bytes": 1,
      "bandwidth_bytes_per_s": 1, "flops_per_s": 1}]})";
    const PoolFile f = parsePoolFile(s, false);
    QVERIFY(!f.model);
    QCOMPARE(f.request.contextTokens, int64_t{4096});
    QCOMPARE(f.request.sequences, int64_t{1});
    QCOMPARE(f.pool.intraNode.latencyS, Pool{}.intraNode.latencyS);
  }

  void missingModelIsAnErrorOnlyWhenRequired() {
    const std::string noModel = R"({"devices": [{"id": "a", "node": "n", "memory_bytes": 1,
      "bandwidth_bytes_per_s": 1, "flops_per_s": 1}]})";
    QVERIFY(errorOf(noModel, false).empty());
    QVERIFY(errorOf(noModel, true).find("model: missing") != std::string::npos);
  }

  void negativeNumberNamesTheField() {
    const std::string e = errorOf(with("\"memory_bytes\": 48e9", "\"memory_bytes\": -5"));
    QVERIFY2(e.find("devices[1].memory_bytes: must be >= 0") != std::string::npos, e.c_str());
  }

  void wrongTypeNamesTheField() {
    const std::string e = errorOf(with("\"flops_per_s\": 1.4e13", "\"flops_per_s\": \"fast\""));
    QVERIFY2(e.find("devices[1].flops_per_s: expected a number, got string") != std::string::npos,
             e.c_str());
  }

  void missingFieldNamesTheField() {
    const std::string e = errorOf(with("\"bandwidth_bytes_per_s\": 4e11,", ""));
    QVERIFY2(e.find("devices[1].bandwidth_bytes_per_s: missing") != std::string::npos, e.c_str());
  }

  void zeroBandwidthIsRejected() {
    const std::string e =
        errorOf(with("\"bandwidth_bytes_per_s\": 4e11", "\"bandwidth_bytes_per_s\": 0"));
    QVERIFY2(e.find("devices[1].bandwidth_bytes_per_s: must be > 0") != std::string::npos,
             e.c_str());
  }

  void fractionalLayerCountIsRejected() {
    const std::string e = errorOf(with("\"layers\": 32", "\"layers\": 31.5"));
    QVERIFY2(e.find("model.layers: expected an integer") != std::string::npos, e.c_str());
  }

  void unknownFieldIsRejected() {
    const std::string e = errorOf(with("\"node\": \"mac\"", "\"node\": \"mac\", \"memroy\": 1"));
    QVERIFY2(e.find("devices[1].memroy: unknown field") != std::string::npos, e.c_str());
  }

  void duplicateDeviceIdIsRejected() {
    const std::string e = errorOf(with("\"id\": \"mac\"", "\"id\": \"pc-4090\""));
    QVERIFY2(e.find("devices[1].id: duplicate id 'pc-4090'") != std::string::npos, e.c_str());
  }

  void linkToAnUnknownNodeIsRejected() {
    const std::string e = errorOf(with("[\"pc\", \"mac\"]", "[\"pc\", \"mca\"]"));
    QVERIFY2(e.find("links[0].nodes[1]: unknown node 'mca'") != std::string::npos, e.c_str());
  }

  void missingLinkBetweenNodesIsRejectedUnlessDefaulted() {
    const std::string noLinks = with(
        R"([{"nodes": ["pc", "mac"], "latency_s": 2e-4, "bandwidth_bytes_per_s": 1.25e8}])", "[]");
    const std::string e = errorOf(noLinks);
    QVERIFY2(e.find("links: no link between nodes 'mac' and 'pc'") != std::string::npos, e.c_str());
    std::string defaulted = noLinks;
    defaulted.insert(defaulted.rfind('}'),
                     R"(, "default_link": {"latency_s": 0.05, "bandwidth_bytes_per_s": 1e7})");
    QVERIFY2(errorOf(defaulted).empty(), errorOf(defaulted).c_str());
  }

  void emptyDeviceListIsRejected() {
    QVERIFY(errorOf(R"({"devices": []})", false).find("devices: must list at least one") !=
            std::string::npos);
  }

  void syntaxErrorIsReported() {
    const std::string e = errorOf("{\"devices\": [", false);
    QVERIFY2(e.find("pool file: not valid JSON") != std::string::npos, e.c_str());
  }

  void perLayerCostsParseWithDefaults() {
    const PoolFile f = parsePoolFile(
        with("\"layers\": 32, \"layer_weight_bytes\": 1.3e8, \"layer_flops_per_token\": 4.4e8,\n"
             "            \"kv_bytes_per_token_per_layer\": 4096,",
             R"("layers": 2, "per_layer": [
               {"weight_bytes": 100, "flops_per_token": 300, "kv_bytes_per_position": 8},
               {"weight_bytes": 300, "read_bytes_per_token": 50, "flops_per_token": 100,
                "kv_bytes_per_position": 4, "window": 64}],)"),
        true);
    QCOMPARE(f.model->perLayer.size(), size_t{2});
    QCOMPARE(f.model->perLayer[0].readBytesPerToken, 100.0);  // defaults to the weights
    QCOMPARE(f.model->perLayer[0].window, int64_t{0});
    QCOMPARE(f.model->perLayer[1].readBytesPerToken, 50.0);
    QCOMPARE(f.model->perLayer[1].window, int64_t{64});
    // W, F and K may be left out: they are the means.
    QCOMPARE(f.model->layerWeightBytes, 200.0);
    QCOMPARE(f.model->layerFlopsPerToken, 200.0);
    QCOMPARE(f.model->kvBytesPerTokenPerLayer, 6.0);
    const PoolFile g = parsePoolFile(writePoolFile(f), true);
    QCOMPARE(g.model->perLayer, f.model->perLayer);
  }

  void perLayerCountMustMatchTheLayers() {
    const std::string e =
        errorOf(with("\"layers\": 32,",
                     R"("layers": 32, "per_layer": [{"weight_bytes": 1, "flops_per_token": 1,
           "kv_bytes_per_position": 1}],)"));
    QVERIFY2(
        e.find("model.per_layer: must list model.layers = 32 layers, got 1") != std::string::npos,
        e.c_str());
    const std::string w =
        errorOf(with("\"layers\": 32,",
                     R"("layers": 1, "per_layer": [{"weight_bytes": 1, "flops_per_token": 1,
           "kv_bytes_per_position": 1, "window": -2}],)"));
    QVERIFY2(w.find("model.per_layer[0].window: must be >= 0") != std::string::npos, w.c_str());
  }

  void writeThenParseGivesTheSamePool() {
    const PoolFile f = parsePoolFile(kValid, true);
    const PoolFile g = parsePoolFile(writePoolFile(f), true);
    QCOMPARE(g.model->layers, f.model->layers);
    QCOMPARE(g.model->kvBytesPerTokenPerLayer, f.model->kvBytesPerTokenPerLayer);
    QCOMPARE(g.request.sequences, f.request.sequences);
    QCOMPARE(g.pool.devices.size(), f.pool.devices.size());
    for (size_t i = 0; i < f.pool.devices.size(); ++i) {
      QCOMPARE(g.pool.devices[i].id, f.pool.devices[i].id);
      QCOMPARE(g.pool.devices[i].node, f.pool.devices[i].node);
      QCOMPARE(g.pool.devices[i].flopsPerS, f.pool.devices[i].flopsPerS);
    }
    QCOMPARE(g.pool.links[0].nodeB, f.pool.links[0].nodeB);
    QCOMPARE(g.pool.intraNode.latencyS, f.pool.intraNode.latencyS);
  }
};

QTEST_GUILESS_MAIN(PlanPoolFileTest)
#include "test_plan_pool_file.moc"
