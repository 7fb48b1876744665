#include "engine/plan/pool_file.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/error.h"

namespace shoal::plan {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("pool file: " + path + ": " + what);
}

std::string typeName(const Json& j) { return j.type_name(); }

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// The object at `path`, with every key checked against the ones allowed there.
const Json& object(const Json& j, const std::string& path,
                   std::initializer_list<const char*> keys) {
  if (!j.is_object())
    fail(path.empty() ? "(top level)" : path, "expected an object, got " + typeName(j));
  std::set<std::string> allowed{"comment"};
  for (const char* k : keys) allowed.insert(k);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!allowed.count(it.key())) {
      std::string list;
      for (const char* k : keys) list += std::string(list.empty() ? "" : ", ") + k;
      fail(join(path, it.key()), "unknown field (expected one of: " + list + ")");
    }
  }
  return j;
}

const Json& field(const Json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(join(path, key), "missing");
  return *it;
}

double number(const Json& obj, const std::string& path, const char* key, bool positive) {
  const Json& v = field(obj, path, key);
  const std::string at = join(path, key);
  if (!v.is_number()) fail(at, "expected a number, got " + typeName(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(at, "must be finite");
  if (positive && !(d > 0)) fail(at, "must be > 0, got " + v.dump());
  if (d < 0) fail(at, "must be >= 0, got " + v.dump());
  return d;
}

int64_t integer(const Json& obj, const std::string& path, const char* key, int64_t minimum) {
  const Json& v = field(obj, path, key);
  const std::string at = join(path, key);
  if (!v.is_number()) fail(at, "expected an integer, got " + typeName(v));
  int64_t i = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(at, "too large: " + v.dump());
    }
    i = v.get<int64_t>();
  } else {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) {
      fail(at, "expected an integer, got " + v.dump());
    }
    i = static_cast<int64_t>(d);
  }
  if (i < minimum) fail(at, "must be >= " + std::to_string(minimum) + ", got " + v.dump());
  return i;
}

std::string text(const Json& obj, const std::string& path, const char* key) {
  const Json& v = field(obj, path, key);
  if (!v.is_string()) fail(join(path, key), "expected a string, got " + typeName(v));
  std::string s = v.get<std::string>();
  if (s.empty()) fail(join(path, key), "must not be empty");
  return s;
}

Link link(const Json& j, const std::string& path, bool withNodes) {
  if (withNodes) {
    object(j, path, {"nodes", "latency_s", "bandwidth_bytes_per_s"});
  } else {
    object(j, path, {"latency_s", "bandwidth_bytes_per_s"});
  }
  return Link{number(j, path, "latency_s", false), number(j, path, "bandwidth_bytes_per_s", true)};
}

std::vector<LayerCost> perLayerBlock(const Json& j, int layers) {
  const std::string path = "model.per_layer";
  if (!j.is_array()) fail(path, "expected an array, got " + typeName(j));
  if (j.size() != static_cast<size_t>(layers)) {
    fail(path, "must list model.layers = " + std::to_string(layers) + " layers, got " +
                   std::to_string(j.size()));
  }
  std::vector<LayerCost> out;
  for (size_t l = 0; l < j.size(); ++l) {
    const std::string at = path + "[" + std::to_string(l) + "]";
    const Json& e = object(j[l], at,
                           {"weight_bytes", "read_bytes_per_token", "flops_per_token",
                            "kv_bytes_per_position", "window"});
    LayerCost c;
    c.weightBytes = number(e, at, "weight_bytes", false);
    c.readBytesPerToken = e.contains("read_bytes_per_token")
                              ? number(e, at, "read_bytes_per_token", false)
                              : c.weightBytes;
    c.flopsPerToken = number(e, at, "flops_per_token", false);
    c.kvBytesPerPosition = number(e, at, "kv_bytes_per_position", false);
    c.window = e.contains("window") ? integer(e, at, "window", 0) : 0;
    out.push_back(c);
  }
  return out;
}

ModelCost modelBlock(const Json& j) {
  const std::string path = "model";
  object(j, path,
         {"layers", "layer_weight_bytes", "layer_flops_per_token", "kv_bytes_per_token_per_layer",
          "per_layer", "hidden_bytes_per_token", "embed_bytes", "head_bytes",
          "head_flops_per_token", "shared_embed_head_bytes"});
  ModelCost m;
  const int64_t layers = integer(j, path, "layers", 1);
  if (layers > 1'000'000) fail("model.layers", "too large: " + std::to_string(layers));
  m.layers = static_cast<int>(layers);
  if (j.contains("per_layer")) m.perLayer = perLayerBlock(j["per_layer"], m.layers);
  // With per_layer the uniform figures are only its means; they may be left out then.
  auto uniformFigure = [&](const char* key, double LayerCost::*figure) {
    if (m.perLayer.empty() || j.contains(key)) return number(j, path, key, false);
    double sum = 0;
    for (const LayerCost& c : m.perLayer) sum += c.*figure;
    return sum / static_cast<double>(m.layers);
  };
  m.layerWeightBytes = uniformFigure("layer_weight_bytes", &LayerCost::weightBytes);
  m.layerFlopsPerToken = uniformFigure("layer_flops_per_token", &LayerCost::flopsPerToken);
  m.kvBytesPerTokenPerLayer =
      uniformFigure("kv_bytes_per_token_per_layer", &LayerCost::kvBytesPerPosition);
  m.hiddenBytesPerToken = number(j, path, "hidden_bytes_per_token", false);
  m.embedBytes = number(j, path, "embed_bytes", false);
  m.headBytes = number(j, path, "head_bytes", false);
  // Optional (files written before it existed): 0, nothing shared.
  if (j.contains("shared_embed_head_bytes")) {
    m.sharedEmbedHeadBytes = number(j, path, "shared_embed_head_bytes", false);
    if (m.sharedEmbedHeadBytes > std::min(m.embedBytes, m.headBytes)) {
      fail(join(path, "shared_embed_head_bytes"), "more than embed_bytes or head_bytes");
    }
  }
  m.headFlopsPerToken = number(j, path, "head_flops_per_token", false);
  return m;
}

}  // namespace

PoolFile parsePoolFile(std::string_view json, bool requireModel) {
  Json root;
  try {
    root = Json::parse(json.begin(), json.end());
  } catch (const Json::parse_error& e) {
    throw Error(std::string("pool file: not valid JSON: ") + e.what());
  }
  object(root, "", {"model", "request", "devices", "links", "intra_node", "default_link"});
  PoolFile out;

  if (root.contains("model")) {
    out.model = modelBlock(root["model"]);
  } else if (requireModel) {
    fail("model", "missing (give a \"model\" block or a GGUF model)");
  }

  if (root.contains("request")) {
    const Json& r = object(root["request"], "request", {"context_tokens", "sequences"});
    if (r.contains("context_tokens"))
      out.request.contextTokens = integer(r, "request", "context_tokens", 0);
    if (r.contains("sequences")) out.request.sequences = integer(r, "request", "sequences", 1);
  }

  const Json& devices = field(root, "", "devices");
  if (!devices.is_array()) fail("devices", "expected an array, got " + typeName(devices));
  if (devices.empty()) fail("devices", "must list at least one device");
  std::map<std::string, size_t> ids;
  std::set<std::string> nodes;
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string path = "devices[" + std::to_string(i) + "]";
    const Json& d = object(devices[i], path,
                           {"id", "node", "memory_bytes", "bandwidth_bytes_per_s", "flops_per_s"});
    Device dev;
    dev.id = text(d, path, "id");
    auto [it, fresh] = ids.emplace(dev.id, i);
    if (!fresh) {
      fail(path + ".id",
           "duplicate id '" + dev.id + "' (also devices[" + std::to_string(it->second) + "])");
    }
    dev.node = text(d, path, "node");
    dev.memoryBytes = number(d, path, "memory_bytes", false);
    dev.bandwidthBytesPerS = number(d, path, "bandwidth_bytes_per_s", true);
    dev.flopsPerS = number(d, path, "flops_per_s", true);
    nodes.insert(dev.node);
    out.pool.devices.push_back(std::move(dev));
  }

  if (root.contains("intra_node"))
    out.pool.intraNode = link(root["intra_node"], "intra_node", false);
  if (root.contains("default_link"))
    out.pool.defaultLink = link(root["default_link"], "default_link", false);

  std::set<std::pair<std::string, std::string>> pairs;
  if (root.contains("links")) {
    const Json& links = root["links"];
    if (!links.is_array()) fail("links", "expected an array, got " + typeName(links));
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string path = "links[" + std::to_string(i) + "]";
      NodeLink nl;
      nl.link = link(links[i], path, true);
      const Json& ends = field(links[i], path, "nodes");
      if (!ends.is_array() || ends.size() != 2) {
        fail(path + ".nodes", "expected an array of two node names, got " + ends.dump());
      }
      for (size_t e = 0; e < 2; ++e) {
        const std::string at = path + ".nodes[" + std::to_string(e) + "]";
        if (!ends[e].is_string()) fail(at, "expected a string, got " + typeName(ends[e]));
        const std::string name = ends[e].get<std::string>();
        if (!nodes.count(name)) fail(at, "unknown node '" + name + "' (no device is on it)");
        (e == 0 ? nl.nodeA : nl.nodeB) = name;
      }
      if (nl.nodeA == nl.nodeB)
        fail(path + ".nodes", "a link joins two different nodes, got '" + nl.nodeA + "' twice");
      auto key = std::minmax(nl.nodeA, nl.nodeB);
      if (!pairs.insert({key.first, key.second}).second) {
        fail(path + ".nodes", "second link between '" + nl.nodeA + "' and '" + nl.nodeB + "'");
      }
      out.pool.links.push_back(std::move(nl));
    }
  }
  if (!out.pool.defaultLink) {
    for (auto a = nodes.begin(); a != nodes.end(); ++a) {
      for (auto b = std::next(a); b != nodes.end(); ++b) {
        if (!pairs.count({*a, *b})) {
          fail("links",
               "no link between nodes '" + *a + "' and '" + *b + "' (add one, or a default_link)");
        }
      }
    }
  }
  return out;
}

std::string writePoolFile(const PoolFile& file) {
  using Ordered = nlohmann::ordered_json;
  Ordered root;
  auto linkJson = [](const Link& l) {
    return Ordered{{"latency_s", l.latencyS}, {"bandwidth_bytes_per_s", l.bandwidthBytesPerS}};
  };
  if (file.model) {
    const ModelCost& m = *file.model;
    root["model"] = {{"layers", m.layers},
                     {"layer_weight_bytes", m.layerWeightBytes},
                     {"layer_flops_per_token", m.layerFlopsPerToken},
                     {"kv_bytes_per_token_per_layer", m.kvBytesPerTokenPerLayer},
                     {"hidden_bytes_per_token", m.hiddenBytesPerToken},
                     {"embed_bytes", m.embedBytes},
                     {"head_bytes", m.headBytes},
                     {"shared_embed_head_bytes", m.sharedEmbedHeadBytes},
                     {"head_flops_per_token", m.headFlopsPerToken}};
    if (!m.perLayer.empty()) {
      Ordered layers = Ordered::array();
      for (const LayerCost& c : m.perLayer) {
        layers.push_back({{"weight_bytes", c.weightBytes},
                          {"read_bytes_per_token", c.readBytesPerToken},
                          {"flops_per_token", c.flopsPerToken},
                          {"kv_bytes_per_position", c.kvBytesPerPosition},
                          {"window", c.window}});
      }
      root["model"]["per_layer"] = layers;
    }
  }
  root["request"] = {{"context_tokens", file.request.contextTokens},
                     {"sequences", file.request.sequences}};
  Ordered devices = Ordered::array();
  for (const Device& d : file.pool.devices) {
    devices.push_back({{"id", d.id},
                       {"node", d.node},
                       {"memory_bytes", d.memoryBytes},
                       {"bandwidth_bytes_per_s", d.bandwidthBytesPerS},
                       {"flops_per_s", d.flopsPerS}});
  }
  root["devices"] = devices;
  Ordered links = Ordered::array();
  for (const NodeLink& l : file.pool.links) {
    Ordered j = linkJson(l.link);
    j["nodes"] = {l.nodeA, l.nodeB};
    links.push_back(j);
  }
  root["links"] = links;
  root["intra_node"] = linkJson(file.pool.intraNode);
  if (file.pool.defaultLink) root["default_link"] = linkJson(*file.pool.defaultLink);
  return root.dump(2);
}

}  // namespace shoal::plan
