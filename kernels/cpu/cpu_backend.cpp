#include "kernels/cpu/cpu_backend.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "engine/error.h"
#include "kernels/cpu/cpu_stage.h"
#include "kernels/cpu/thread_pool.h"

namespace shoal::cpu {
namespace {

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "CPU";
}

// MemTotal / MemAvailable from /proc/meminfo, in bytes (0 when unknown).
void memoryInfo(uint64_t& total, uint64_t& available) {
  total = available = 0;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") available = kib * 1024;
  }
}

}  // namespace

int defaultCpuThreads() {
  // Physical cores: distinct (physical id, core id) pairs. SMT siblings share the execution
  // units a memory-bound decode needs, so llama.cpp defaults to physical cores too.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int physical = 0;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (line.rfind("physical id", 0) == 0) physical = std::stoi(line.substr(colon + 1));
    if (line.rfind("core id", 0) == 0) cores.insert({physical, std::stoi(line.substr(colon + 1))});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

CpuBackend::CpuBackend(int threads)
    : m_threads(threads > 0 ? threads : defaultCpuThreads()),
      m_pool(std::make_shared<ThreadPool>(m_threads)) {}

CpuBackend::~CpuBackend() = default;

std::vector<runtime::DeviceInfo> CpuBackend::devices() const {
  runtime::DeviceInfo d;
  d.id = "cpu0";
  d.backend = "cpu";
  d.name = cpuModelName() + " (" + std::to_string(m_threads) + " threads)";
  d.type = "cpu";
  memoryInfo(d.memoryTotal, d.memoryFree);
  return {d};
}

std::unique_ptr<runtime::Stage> CpuBackend::createStage(const std::string& deviceId,
                                                        const runtime::ModelSource& model,
                                                        const runtime::StageSpec& spec) {
  if (deviceId != "cpu0") throw Error("CPU backend: unknown device '" + deviceId + "'");
  return std::make_unique<CpuStage>(model, spec, m_pool);
}

}  // namespace shoal::cpu
