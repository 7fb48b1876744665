#pragma once
// Random, reproducible damage to protocol messages (a seeded generator): a field removed or
// replaced by a value of another JSON type or at a limit a range check must catch, a blob cut,
// grown or filled with random bytes. The node-protocol mutation tests use it in both directions:
// a coordinator's requests to a node, and a node's replies to a coordinator.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace shoal::lan::test {

// An integer from the environment (a test's seed or round count), or the fallback.
inline int64_t envInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

class Mutator {
 public:
  using json = nlohmann::json;

  explicit Mutator(uint64_t seed) : m_rng(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(m_rng); }
  bool chance(int percent) { return pick(100) < percent; }

  // A value of some JSON type, often at a limit a field's range check must catch.
  json weirdValue() {
    static const std::vector<json> kValues = {nullptr,
                                              true,
                                              false,
                                              0,
                                              -1,
                                              1,
                                              std::numeric_limits<int32_t>::max(),
                                              int64_t{std::numeric_limits<int32_t>::max()} + 1,
                                              std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<uint64_t>::max(),
                                              0.5,
                                              -1e300,
                                              1e300,
                                              "",
                                              "x",
                                              "none",
                                              std::string(5000, 'a'),
                                              json::array(),
                                              json::array({1, 2}),
                                              json::object(),
                                              json{{"a", 1}},
                                              1 << 16};

    const int k = pick(int(kValues.size()) + 2);
    if (k == int(kValues.size())) return pick(64);  // small: often within a field's range
    if (k > int(kValues.size())) return -pick(1 << 20);
    return kValues[size_t(k)];
  }

  // One mutation somewhere in `v` (an object or array, walking into nested ones at random).
  void mutate(json& v) {
    if (v.is_object() && !v.empty()) {
      auto it = v.begin();
      std::advance(it, pick(int(v.size())));
      // By key, not through the iterator: GCC 12 sees a null dereference in the iterator's
      // assignment once this is inlined into some callers (-Wnull-dereference).
      const std::string key = it.key();
      if (key == "op") return;  // the op stays: the point is to reach each handler
      json& field = v[key];
      if ((field.is_object() || field.is_array()) && !field.empty() && chance(50)) {
        mutate(field);
      } else if (chance(25)) {
        v.erase(key);
      } else {
        field = weirdValue();
      }
    } else if (v.is_array() && !v.empty()) {
      json& e = v[size_t(pick(int(v.size())))];
      if ((e.is_object() || e.is_array()) && !e.empty() && chance(50)) {
        mutate(e);
      } else if (chance(20)) {
        v.push_back(weirdValue());
      } else {
        e = weirdValue();
      }
    }
  }

  void mutateBlob(std::vector<uint8_t>& blob) {
    switch (pick(6)) {
      case 0:
        blob.clear();
        break;
      case 1:
        blob.resize(blob.size() / 2);
        break;
      case 2:
        blob.resize(blob.size() + 1 + size_t(pick(4096)));
        break;
      case 3:  // random bytes: token ids out of range, NaN and Inf hidden states
        for (uint8_t& b : blob) b = uint8_t(pick(256));
        break;
      case 4:
        if (!blob.empty()) blob[size_t(pick(int(blob.size())))] ^= 0xff;
        break;
      default: {  // every float a non-finite value, or every id a large one
        std::vector<uint8_t> bits(4);
        const float x = std::numeric_limits<float>::infinity();
        std::memcpy(bits.data(), &x, 4);
        for (size_t i = 0; i + 4 <= blob.size(); i += 4) std::memcpy(&blob[i], bits.data(), 4);
      }
    }
  }

 private:
  std::mt19937_64 m_rng;
};

}  // namespace shoal::lan::test
