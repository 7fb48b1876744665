#include "lan/pool/node_info.h"

#include <cmath>
#include <set>

#include "engine/error.h"
#include "lan/discovery/display_name.h"

namespace shoal::lan {
namespace {

using nlohmann::json;

const json& field(const json& object, const char* key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) throw Error(path + "." + key + ": missing");
  return *it;
}

// A layer number field (0 .. 1,000,000).
int32_t layerField(const json& object, const char* key, const std::string& at) {
  const auto v = object.find(key);
  if (v == object.end() || !v->is_number_integer() || v->get<int64_t>() < 0 ||
      v->get<int64_t>() > 1000000) {
    throw Error(at + "." + key + ": must be a layer number");
  }
  return static_cast<int32_t>(v->get<int64_t>());
}

// An array of at most `most` entries.
void checkArray(const json& value, const std::string& at, size_t most) {
  if (!value.is_array()) throw Error(at + ": must be an array");
  if (value.size() > most) {
    throw Error(at + ": " + std::to_string(value.size()) + " entries, at most " +
                std::to_string(most));
  }
}

std::string stringField(const json& object, const char* key, const std::string& path,
                        bool required = true) {
  const auto it = object.find(key);
  if (it == object.end()) {
    if (required) throw Error(path + "." + key + ": missing");
    return {};
  }
  if (!it->is_string()) throw Error(path + "." + key + ": must be a string");
  return it->get<std::string>();
}

uint64_t bytesField(const json& object, const char* key, const std::string& path) {
  const json& v = field(object, key, path);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  throw Error(path + "." + key + ": must be an integer >= 0, got " + v.dump());
}

double rateField(const json& object, const char* key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return 0;  // not profiled
  if (!it->is_number()) throw Error(path + "." + key + ": must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) throw Error(path + "." + key + ": must be finite and >= 0");
  return v;
}

}  // namespace

bool NodeInfo::hasModel(const std::string& sha256) const {
  for (const NodeModel& m : models) {
    if (m.sha256 == sha256) return true;
  }
  return false;
}

bool NodeInfo::hasFeature(const std::string& name) const {
  for (const std::string& f : features) {
    if (f == name) return true;
  }
  return false;
}

NodeInfo parseNodeInfo(const json& reply) {
  const std::string path = "node_info";
  if (!reply.is_object()) throw Error(path + ": not a JSON object");
  NodeInfo info;
  // Printed by `pool status` and shown in the app: one safe line (display_name.h).
  info.name = sanitizeDisplayText(stringField(reply, "name", path));
  info.deviceId = stringField(reply, "device_id", path);
  if (info.deviceId.empty()) throw Error(path + ".device_id: empty");

  const json& devices = field(reply, "devices", path);
  if (!devices.is_array()) throw Error(path + ".devices: must be an array");
  std::set<std::string> ids;
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string at = path + ".devices[" + std::to_string(i) + "]";
    const json& d = devices[i];
    if (!d.is_object()) throw Error(at + ": must be an object");
    NodeDevice dev;
    dev.id = stringField(d, "id", at);
    if (dev.id.empty()) throw Error(at + ".id: empty");
    if (!ids.insert(dev.id).second) throw Error(at + ".id: duplicate device id " + dev.id);
    dev.backend = stringField(d, "backend", at, false);
    dev.name = stringField(d, "name", at, false);
    dev.type = stringField(d, "type", at, false);
    dev.memoryTotal = bytesField(d, "memory_total", at);
    dev.memoryFree = d.contains("memory_free") ? bytesField(d, "memory_free", at) : 0;
    if (dev.memoryFree > dev.memoryTotal) {
      throw Error(at + ".memory_free: " + std::to_string(dev.memoryFree) +
                  " exceeds memory_total " + std::to_string(dev.memoryTotal));
    }
    dev.bandwidthBytesPerS = rateField(d, "bandwidth_bytes_per_s", at);
    dev.flopsPerS = rateField(d, "flops_per_s", at);
    info.devices.push_back(std::move(dev));
  }

  if (const auto it = reply.find("models"); it != reply.end()) {
    if (!it->is_array()) throw Error(path + ".models: must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string at = path + ".models[" + std::to_string(i) + "]";
      const json& m = (*it)[i];
      if (!m.is_object()) throw Error(at + ": must be an object");
      NodeModel model;
      model.file = stringField(m, "file", at, false);
      model.sha256 = stringField(m, "sha256", at);
      model.size = m.contains("size") ? bytesField(m, "size", at) : 0;
      info.models.push_back(std::move(model));
    }
  }

  if (const auto it = reply.find("warnings"); it != reply.end()) {
    if (!it->is_array()) throw Error(path + ".warnings: must be an array");
    if (it->size() > kMaxNodeInfoWarnings) {
      throw Error(path + ".warnings: " + std::to_string(it->size()) + " entries, at most " +
                  std::to_string(kMaxNodeInfoWarnings));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& w = (*it)[i];
      if (!w.is_string()) throw Error(path + ".warnings[" + std::to_string(i) + "]: not a string");
      info.warnings.push_back(
          sanitizeDisplayText(w.get_ref<const std::string&>(), kMaxNodeInfoWarningBytes));
    }
  }
  if (const auto it = reply.find("links"); it != reply.end()) {
    checkArray(*it, path + ".links", kMaxNodeInfoLinks);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& l = (*it)[i];
      const std::string at = path + ".links[" + std::to_string(i) + "]";
      if (!l.is_object()) throw Error(at + ": must be an object");
      NodeForward f;
      const json& stage = l.value("stage_id", json());
      f.stageId =
          sanitizeDisplayText(stage.is_string() ? stage.get<std::string>() : stage.dump(), 128);
      f.firstLayer = layerField(l, "first_layer", at);
      f.lastLayer = layerField(l, "last_layer", at);
      f.toDevice = sanitizeDisplayText(stringField(l, "to_device", at), 128);
      f.address = sanitizeDisplayText(stringField(l, "address", at, false), 300);
      const auto open = l.find("open");
      f.open = open != l.end() && open->is_boolean() && open->get<bool>();
      info.forwards.push_back(std::move(f));
    }
  }
  if (const auto it = reply.find("shards"); it != reply.end()) {
    checkArray(*it, path + ".shards", kMaxNodeInfoShards);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      const std::string at = path + ".shards[" + std::to_string(i) + "]";
      if (!e.is_object()) throw Error(at + ": must be an object");
      CachedShard c;
      c.model = stringField(e, "model", at);
      c.firstLayer = layerField(e, "first_layer", at);
      c.lastLayer = layerField(e, "last_layer", at);
      if (c.lastLayer <= c.firstLayer) throw Error(at + ": an empty layer range");
      info.shards.push_back(std::move(c));
    }
  }
  if (const auto it = reply.find("features"); it != reply.end()) {
    checkArray(*it, path + ".features", kMaxNodeInfoFeatures);
    for (const json& f : *it) {
      // Names this coordinator does not know are kept and never matched.
      if (f.is_string()) info.features.push_back(sanitizeDisplayText(f.get<std::string>(), 64));
    }
  }
  return info;
}

json nodeInfoToJson(const NodeInfo& info) {
  json devices = json::array();
  for (const NodeDevice& d : info.devices) {
    devices.push_back({{"id", d.id},
                       {"backend", d.backend},
                       {"name", d.name},
                       {"type", d.type},
                       {"memory_total", d.memoryTotal},
                       {"memory_free", d.memoryFree},
                       {"bandwidth_bytes_per_s", d.bandwidthBytesPerS},
                       {"flops_per_s", d.flopsPerS}});
  }
  json models = json::array();
  for (const NodeModel& m : info.models) {
    models.push_back({{"file", m.file}, {"sha256", m.sha256}, {"size", m.size}});
  }
  json out = {{"op", "node_info"},
              {"name", info.name},
              {"device_id", info.deviceId},
              {"devices", devices},
              {"models", models}};
  if (!info.warnings.empty()) out["warnings"] = info.warnings;
  if (!info.forwards.empty()) {
    json links = json::array();
    for (const NodeForward& f : info.forwards) {
      links.push_back({{"stage_id", f.stageId},
                       {"first_layer", f.firstLayer},
                       {"last_layer", f.lastLayer},
                       {"to_device", f.toDevice},
                       {"address", f.address},
                       {"open", f.open}});
    }
    out["links"] = links;
  }
  if (!info.shards.empty()) {
    json shards = json::array();
    for (const CachedShard& c : info.shards) {
      shards.push_back(
          {{"model", c.model}, {"first_layer", c.firstLayer}, {"last_layer", c.lastLayer}});
    }
    out["shards"] = shards;
  }
  if (!info.features.empty()) out["features"] = info.features;
  return out;
}

}  // namespace shoal::lan
