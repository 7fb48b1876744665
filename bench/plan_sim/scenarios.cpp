#include "bench/plan_sim/scenarios.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "bench/plan_sim/device_specs.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"

namespace shoal::plan_sim {

using plan::Device;
using plan::Link;
using plan::NodeLink;
using plan::Pool;
using plan::PoolFile;

uint64_t Rng::next() {
  uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform(double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
}

int Rng::between(int lo, int hi) {
  return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
}

bool Rng::chance(double p) { return uniform(0, 1) < p; }

namespace {

// Layer count, width, FFN width, heads, KV heads, head dim, vocabulary: from the models'
// config.json files.
constexpr std::array kModels = {
    ModelPreset{"Llama-3.1-8B Q4_K_M", 32, 4096, 14336, 32, 8, 128, 128256},
    ModelPreset{"Qwen2.5-14B Q4_K_M", 48, 5120, 13824, 40, 8, 128, 152064},
    ModelPreset{"Qwen2.5-32B Q4_K_M", 64, 5120, 27648, 40, 8, 128, 152064},
    ModelPreset{"Llama-3.1-70B Q4_K_M", 80, 8192, 28672, 64, 8, 128, 128256},
    ModelPreset{"Mistral-Large-2 123B Q4_K_M", 88, 12288, 28672, 96, 8, 128, 32768},
    ModelPreset{"Llama-3.1-405B Q4_K_M", 126, 16384, 53248, 128, 8, 128, 128256},
};

// Q4_K_M stores most layer weights as Q4_K (4.5 bits) and some (attn_v, half of ffn_down) as
// Q6_K (6.5625 bits): about 4.85 bits a weight over a layer. Embedding Q4_K, output Q6_K.
constexpr double kLayerBits = 4.85, kEmbedBits = 4.5, kHeadBits = 6.5625;

// LAN links between the machines of a home lab (one-way latency through the TCP stack,
// achievable throughput).
struct LanKind {
  const char* name;
  Link link;
  double weight;
};
constexpr std::array kLans = {
    LanKind{"1GbE", Link{2.5e-4, 1.17e8}, 0.40},
    LanKind{"2.5GbE", Link{2.0e-4, 2.9e8}, 0.25},
    LanKind{"10GbE", Link{8.0e-5, 1.15e9}, 0.15},
    LanKind{"WiFi6", Link{2.0e-3, 6.0e7}, 0.20},
};

// Concatenation by appending: GCC 12 at -O3 warns falsely on "literal" + std::string.
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s += p;
  return s;
}

Device makeDevice(const DeviceSpec& spec, const std::string& id, const std::string& node) {
  Device d;
  d.id = id;
  d.node = node;
  d.memoryBytes = spec.memoryGB * 1e9 * spec.usableFraction();
  d.bandwidthBytesPerS = spec.bandwidthGBs * 1e9;
  d.flopsPerS = spec.fp16Tflops * 1e12;
  return d;
}

std::string shortName(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c == ' ')
      s += '-';
    else
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

template <size_t N>
std::string_view pick(Rng& rng, const std::array<std::string_view, N>& names) {
  return names[static_cast<size_t>(rng.between(0, static_cast<int>(N) - 1))];
}

double modelBytes(const plan::ModelCost& m, const plan::Request& r) {
  return m.layers * plan::perLayerBytes(m, r) + m.embedBytes + m.headBytes;
}

}  // namespace

std::span<const ModelPreset> modelPresets() { return kModels; }

plan::ModelCost modelCost(const ModelPreset& p, int64_t contextTokens) {
  plan::ModelFacts f;
  f.arch = "llama";
  f.blockCount = p.layers;
  f.embeddingLength = p.embd;
  f.headCount = p.heads;
  f.headCountKv = p.kvHeads;
  f.keyLength = f.valueLength = p.headDim;
  f.vocabSize = p.vocab;
  const int64_t e = p.embd, q = int64_t{p.heads} * p.headDim, kv = int64_t{p.kvHeads} * p.headDim;
  const int64_t ff = p.feedForward;
  auto tensor = [](std::string name, int64_t elements, double bits, int64_t rows) {
    return plan::ModelFacts::Tensor{
        std::move(name), static_cast<size_t>(std::llround(elements * bits / 8)), elements, rows};
  };
  for (int l = 0; l < p.layers; ++l) {
    const std::string b = cat({"blk.", std::to_string(l), "."});
    f.tensors.push_back(tensor(cat({b, "attn_q.weight"}), e * q, kLayerBits, q));
    f.tensors.push_back(tensor(cat({b, "attn_k.weight"}), e * kv, kLayerBits, kv));
    f.tensors.push_back(tensor(cat({b, "attn_v.weight"}), e * kv, kLayerBits, kv));
    f.tensors.push_back(tensor(cat({b, "attn_output.weight"}), q * e, kLayerBits, e));
    f.tensors.push_back(tensor(cat({b, "ffn_gate.weight"}), e * ff, kLayerBits, ff));
    f.tensors.push_back(tensor(cat({b, "ffn_up.weight"}), e * ff, kLayerBits, ff));
    f.tensors.push_back(tensor(cat({b, "ffn_down.weight"}), ff * e, kLayerBits, e));
    f.tensors.push_back(tensor(cat({b, "attn_norm.weight"}), e, 32, 1));
    f.tensors.push_back(tensor(cat({b, "ffn_norm.weight"}), e, 32, 1));
  }
  f.tensors.push_back(tensor("token_embd.weight", e * p.vocab, kEmbedBits, p.vocab));
  f.tensors.push_back(tensor("output.weight", e * p.vocab, kHeadBits, p.vocab));
  f.tensors.push_back(tensor("output_norm.weight", e, 32, 1));
  return plan::modelCostFromFacts(f, contextTokens);
}

Scenario homeLab(Rng& rng, int index) {
  static constexpr std::array<std::string_view, 13> kGamingGpus = {
      "RTX 4090",   "RTX 4080",      "RTX 4070",     "RTX 4060 Ti 16GB", "RTX 3090",
      "RTX 3080",   "RTX 3060 12GB", "RTX 2080 Ti",  "GTX 1080 Ti",      "RX 7900 XTX",
      "RX 7900 XT", "RX 6800 XT",    "Arc A770 16GB"};
  static constexpr std::array<std::string_view, 3> kCpus = {"Ryzen 9 7950X", "Core i7-12700K",
                                                            "Ryzen 7 5800X"};
  static constexpr std::array<std::string_view, 5> kMacs = {
      "M1 Pro 32GB", "M2 Max 64GB", "M3 Max 128GB", "M4 Pro 48GB", "M2 Ultra 192GB"};
  static constexpr std::array<std::string_view, 2> kIgpus = {"Radeon 780M", "Iris Xe 96EU"};
  static constexpr std::array<std::string_view, 4> kWorkstationGpus = {
      "RTX 3090", "Tesla P40", "A100 40GB PCIe", "RTX 4090"};

  Scenario s;
  Pool& pool = s.file.pool;
  const int machines = rng.between(1, 4);
  for (int m = 0; m < machines && pool.devices.size() < 8; ++m) {
    const double kind = rng.uniform(0, 1);
    std::vector<std::string_view> parts;
    std::string node;
    if (kind < 0.50) {
      node = cat({"pc", std::to_string(m)});
      const int gpus = rng.chance(0.3) ? 2 : 1;
      for (int g = 0; g < gpus; ++g) parts.push_back(pick(rng, kGamingGpus));
      if (rng.chance(0.5)) parts.push_back(pick(rng, kCpus));
    } else if (kind < 0.75) {
      node = cat({"mac", std::to_string(m)});
      parts.push_back(pick(rng, kMacs));
    } else if (kind < 0.90) {
      node = cat({"laptop", std::to_string(m)});
      parts.push_back(pick(rng, kIgpus));
    } else {
      node = cat({"ws", std::to_string(m)});
      const std::string_view gpu = pick(rng, kWorkstationGpus);
      for (int g = rng.between(2, 4); g > 0; --g) parts.push_back(gpu);
    }
    for (size_t i = 0; i < parts.size() && pool.devices.size() < 8; ++i) {
      pool.devices.push_back(
          makeDevice(deviceSpec(parts[i]),
                     cat({node, "-", std::to_string(i), "-", shortName(parts[i])}), node));
    }
  }
  if (pool.devices.size() < 2) {
    const std::string node = cat({"laptop", std::to_string(machines)});
    pool.devices.push_back(makeDevice(deviceSpec(pick(rng, kIgpus)), cat({node, "-0-igpu"}), node));
  }

  // One LAN joins the machines.
  double r = rng.uniform(0, 1);
  const LanKind* lan = &kLans.back();
  for (const LanKind& k : kLans) {
    if (r < k.weight) {
      lan = &k;
      break;
    }
    r -= k.weight;
  }
  std::vector<std::string> nodes;
  for (const Device& d : pool.devices) {
    if (std::find(nodes.begin(), nodes.end(), d.node) == nodes.end()) nodes.push_back(d.node);
  }
  for (size_t a = 0; a < nodes.size(); ++a) {
    for (size_t b = a + 1; b < nodes.size(); ++b)
      pool.links.push_back({nodes[a], nodes[b], lan->link});
  }

  plan::Request& req = s.file.request;
  req.sequences = rng.chance(0.6) ? 1 : 4;
  req.contextTokens = rng.chance(0.5) ? 4096 : 8192;

  // The model: one the pool holds with room to spare (a user picks what their machines can run),
  // most often the largest such.
  double total = 0;
  for (const Device& d : pool.devices) total += d.memoryBytes;
  std::vector<const ModelPreset*> fitting;
  for (const ModelPreset& p : kModels) {
    if (p.layers > 88) continue;  // 405B is no home-lab model
    if (modelBytes(modelCost(p, req.contextTokens), req) <= 0.8 * total) fitting.push_back(&p);
  }
  if (fitting.empty()) {
    req.contextTokens = 2048;
    fitting.push_back(&kModels.front());
  }
  const ModelPreset* model =
      rng.chance(0.6)
          ? fitting.back()
          : fitting[static_cast<size_t>(rng.between(0, static_cast<int>(fitting.size()) - 1))];
  s.file.model = modelCost(*model, req.contextTokens);
  s.modelName = model->name;
  s.name = cat({"home-lab-", std::to_string(index), " (", lan->name, ")"});
  for (const Device& d : pool.devices) {
    if (d.bandwidthBytesPerS != pool.devices.front().bandwidthBytesPerS ||
        d.memoryBytes != pool.devices.front().memoryBytes) {
      s.heterogeneous = true;
    }
  }
  return s;
}

Scenario volunteer(Rng& rng, int devices, int index) {
  // What volunteers bring: mostly gaming GPUs, some Macs, a few datacenter cards.
  static constexpr std::array<std::string_view, 15> kGpus = {
      "RTX 4090",    "RTX 4090",      "RTX 3090",      "RTX 3090",         "RTX 4080",
      "RTX 4070",    "RTX 3080",      "RTX 3060 12GB", "RTX 4060 Ti 16GB", "RX 7900 XTX",
      "RTX 2080 Ti", "Arc A770 16GB", "M2 Max 64GB",   "M3 Max 128GB",     "A100 80GB SXM"};
  constexpr int kRegions = 6;
  Scenario s;
  Pool& pool = s.file.pool;
  std::vector<std::pair<std::string, int>> nodes;  // name, region
  int n = 0;
  while (n < devices) {
    const std::string node = cat({"v", std::to_string(nodes.size())});
    const int region = rng.between(0, kRegions - 1);
    nodes.push_back({node, region});
    const std::string_view gpu = pick(rng, kGpus);
    const bool apple = deviceSpec(gpu).kind == DeviceKind::AppleSilicon;
    int count = (!apple && rng.chance(0.25)) ? rng.between(2, 4) : 1;
    count = std::min(count, devices - n);
    for (int g = 0; g < count; ++g, ++n) {
      pool.devices.push_back(
          makeDevice(deviceSpec(gpu), cat({node, "-", std::to_string(g)}), node));
    }
  }
  // Residential and small-office uplinks: within a region 5–25 ms and 100–500 Mbit/s; across
  // regions the default, 70 ms and 100 Mbit/s.
  pool.defaultLink = Link{0.070, 1.25e7};
  for (size_t a = 0; a < nodes.size(); ++a) {
    for (size_t b = a + 1; b < nodes.size(); ++b) {
      if (nodes[a].second != nodes[b].second) continue;
      pool.links.push_back({nodes[a].first, nodes[b].first,
                            Link{rng.uniform(0.005, 0.025), rng.uniform(1.25e7, 6.25e7)}});
    }
  }
  plan::Request& req = s.file.request;
  req.sequences = 8;
  req.contextTokens = 4096;
  const ModelPreset& model = devices < 32 || index % 2 == 0 ? kModels[3] : kModels[5];
  s.file.model = modelCost(model, req.contextTokens);
  s.modelName = model.name;
  s.name = cat({"volunteer-", std::to_string(devices), "-", std::to_string(index)});
  s.heterogeneous = true;
  return s;
}

}  // namespace shoal::plan_sim
