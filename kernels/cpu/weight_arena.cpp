#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace shoal::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Transparent huge pages for madvise'd memory: "always" or "madvise" in the kernel's setting.
bool hugePagesAvailable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  std::getline(f, setting);
  return setting.find("[always]") != std::string::npos ||
         setting.find("[madvise]") != std::string::npos;
}

// MemAvailable from /proc/meminfo in bytes (0 when unknown).
size_t memAvailable() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

WeightArena::WeightArena(WeightArena&& other) noexcept { *this = std::move(other); }

WeightArena& WeightArena::operator=(WeightArena&& other) noexcept {
  if (this != &other) {
    if (m_mapping) munmap(m_mapping, m_mappingBytes);
    m_ranges = std::move(other.m_ranges);
    m_region = std::exchange(other.m_region, nullptr);
    m_mapping = std::exchange(other.m_mapping, nullptr);
    m_mappingBytes = std::exchange(other.m_mappingBytes, 0);
    m_used = std::exchange(other.m_used, 0);
  }
  return *this;
}

WeightArena::~WeightArena() {
  if (m_mapping) munmap(m_mapping, m_mappingBytes);
}

void WeightArena::add(const uint8_t* p, size_t bytes) {
  if (p == nullptr || bytes == 0 || m_region) return;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  m_ranges.push_back({begin, begin + bytes, 0});
}

bool WeightArena::build(const Release& release, int threads) {
  if (m_region || m_ranges.empty()) return false;
  const char* mode = std::getenv("SHOAL_CPU_WEIGHTS");
  if (mode && std::string(mode) == "mapped") return false;
  if (!hugePagesAvailable()) return false;

  std::sort(m_ranges.begin(), m_ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& r : m_ranges) {
    if (!merged.empty() && r.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, r.end);
    } else {
      merged.push_back(r);
    }
  }
  // Each range keeps its address modulo 64 in the copy, so whatever alignment the file gave a
  // tensor (GGUF's default is 32) holds in the copy too.
  size_t total = 0;
  for (Range& r : merged) {
    total = (total + 63) / 64 * 64 + (r.begin % 64);
    r.offset = total;
    total += r.end - r.begin;
  }
  const size_t available = memAvailable();
  if (available == 0 || static_cast<double>(total) > kMaxShareOfAvailable * available) {
    return false;
  }
  const size_t regionBytes = (total + kHugePage - 1) / kHugePage * kHugePage;
  const size_t mappingBytes = regionBytes + kHugePage;  // room to align to 2 MiB
  void* mapping =
      mmap(nullptr, mappingBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return false;
  auto* region = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mapping) + kHugePage - 1) /
                                            kHugePage * kHugePage);
#ifdef MADV_HUGEPAGE
  madvise(region, regionBytes, MADV_HUGEPAGE);  // a hint: without it the copy still works
#endif
  struct Chunk {
    uintptr_t from;  // source
    size_t bytes, offset;
  };
  std::vector<Chunk> chunks;
  for (const Range& r : merged) {
    for (uintptr_t from = r.begin; from < r.end; from += kChunkBytes) {
      chunks.push_back(
          {from, std::min<size_t>(kChunkBytes, r.end - from), r.offset + (from - r.begin)});
    }
  }
  // On `threads` threads: first touches of fresh memory (the kernel zeroing each huge page, and
  // under a hypervisor the host backing it) dominate the copy's time, and they run in parallel.
  // Threads of its own, not the stage's pool: another stage may be running on that pool while
  // this one is built.
  std::atomic<size_t> next{0};
  auto copy = [&] {
    for (size_t i = next++; i < chunks.size(); i = next++) {
      const Chunk& c = chunks[i];
      const auto* src = reinterpret_cast<const uint8_t*>(c.from);
      std::memcpy(region + c.offset, src, c.bytes);
      if (release) release(src, c.bytes);
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(copy);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the ones running (or this one alone) copy the rest
    }
  }
  copy();
  for (std::thread& h : helpers) h.join();
  m_ranges = std::move(merged);
  m_region = region;
  m_mapping = mapping;
  m_mappingBytes = mappingBytes;
  m_used = total;
  return true;
}

const uint8_t* WeightArena::remap(const uint8_t* p) const {
  if (!m_region || p == nullptr) return p;
  const auto a = reinterpret_cast<uintptr_t>(p);
  // The last range starting at or before a.
  auto it = std::upper_bound(m_ranges.begin(), m_ranges.end(), a,
                             [](uintptr_t v, const Range& r) { return v < r.begin; });
  if (it == m_ranges.begin()) return p;
  --it;
  if (a >= it->end) return p;
  return m_region + it->offset + (a - it->begin);
}

}  // namespace shoal::cpu
