#pragma once
// A tiny test harness for the GPU runners (no Qt on the GPU machine): CHECK-style results
// printed as "PASS name" / "FAIL name: why", a final "N passed, N failed" line, and the exit
// status. Normalized MSE is llama.cpp test-backend-ops' measure: sum((a-b)^2) / sum(b^2).

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace shoal::gpu_test {

struct Tally {
  int passed = 0;
  int failed = 0;
  void pass(const std::string& name, const std::string& detail = {}) {
    ++passed;
    std::printf("PASS %s%s%s\n", name.c_str(), detail.empty() ? "" : "  ", detail.c_str());
  }
  void fail(const std::string& name, const std::string& why) {
    ++failed;
    std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
  }
  void expect(bool ok, const std::string& name, const std::string& detail) {
    ok ? pass(name, detail) : fail(name, detail);
  }
  int finish() const {
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  }
};

// A string as a JSON string literal's contents (quotes, backslashes and control characters
// escaped), for the one-line JSON reports: error texts and device names are arbitrary.
inline std::string jsonEscape(const std::string& in) {
  std::string out;
  for (const char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  if (got.size() != want.size() || !std::isfinite(err)) return INFINITY;
  return ref == 0 ? err : err / ref;
}

}  // namespace shoal::gpu_test
