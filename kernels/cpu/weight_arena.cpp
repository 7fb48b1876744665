#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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

WeightArena::WeightArena() = default;

WeightArena::~WeightArena() {
  stop();
  if (m_mapping) munmap(m_mapping, m_mappingBytes);
}

void WeightArena::add(size_t unit, const uint8_t* p, size_t bytes, Transform transform,
                      size_t granule) {
  if (p == nullptr || bytes == 0 || m_region) return;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  if (!transform || bytes % std::max<size_t>(granule, 1) != 0) granule = 0;
  m_ranges.push_back({begin, begin + bytes, unit, 0, std::move(transform), granule});
  m_units = std::max(m_units, unit + 1);
}

bool WeightArena::start(OnCopied onCopied, Release release, size_t urgentUnits) {
  if (m_region || m_ranges.empty()) return false;
  const char* mode = std::getenv("SHOAL_CPU_WEIGHTS");
  if (mode && std::string(mode) == "mapped") return false;
  if (!hugePagesAvailable()) return false;

  std::sort(m_ranges.begin(), m_ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> merged;
  for (const Range& r : m_ranges) {
    Range* last = merged.empty() ? nullptr : &merged.back();
    // Overlapping ranges become one, copied with the lower unit (both units' readers find their
    // bytes in it once it is copied: units are copied in order). Ranges that only touch are
    // merged within a unit: across units they stay apart, so that adopting one unit gives back
    // only its own source.
    if (last && (r.begin < last->end || (r.begin == last->end && r.unit == last->unit))) {
      last->end = std::max(last->end, r.end);
      last->unit = std::min(last->unit, r.unit);
      last->transform = {};  // a transform only of a range of its own
      last->granule = 0;
    } else {
      merged.push_back(r);
    }
  }
  // Each range keeps its address modulo 32 in the copy, so whatever alignment up to 32 the file
  // gave its bytes (GGUF's default for tensors is 32) holds in the copy too, and a range that
  // begins on a 32-byte boundary begins on a cache line there: in a file whose tensor data
  // starts at 32 mod 64 (its header's length decides) every 64-byte load of such a matrix would
  // otherwise straddle two lines.
  size_t total = 0;
  for (Range& r : merged) {
    total = (total + 63) / 64 * 64 + (r.begin % 32);
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
  m_ranges = std::move(merged);
  m_region = region;
  m_mapping = mapping;
  m_mappingBytes = mappingBytes;
  m_used = total;
  m_onCopied = std::move(onCopied);
  m_release = std::move(release);
  m_urgentUnits = urgentUnits;
  try {
    m_thread = std::thread([this] { copyAll(true); });
  } catch (const std::system_error&) {
    copyAll(false);  // no thread to be had: copy now, on the caller's (at its priority)
  }
  return true;
}

// One thread: the copy's time goes to first touches of fresh memory, and a second copying thread
// would take a core from the forward passes running meanwhile.
void WeightArena::copyAll(bool ownThread) {
  for (size_t unit = 0; unit < m_units; ++unit) {
#ifdef __linux__
    // After the urgent units, the lowest priority (on Linux a thread has a nice value of its
    // own): the copy takes only the time the forward passes leave, so the first tokens are not
    // slowed by it, and it completes while the stage is idle (between a chat's turns, say). At
    // normal priority throughout, on the 2-core EPYC VM, a 32-token Q5_K generation took
    // 1.55-1.91 s instead of the mapping's 1.13-1.18; at nice 19, 1.13.
    if (ownThread && unit == m_urgentUnits)
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
    for (const Range& r : m_ranges) {
      if (r.unit != unit) continue;
      // A transform with a granule rewrites each chunk before the chunk is shown (m_copiedTo),
      // so chunks are whole granules.
      const bool pieces = r.transform && r.granule > 0;
      const size_t chunk =
          pieces ? std::max(r.granule, kChunkBytes / r.granule * r.granule) : kChunkBytes;
      for (uintptr_t from = r.begin; from < r.end; from += chunk) {
        if (m_stop.load(std::memory_order_relaxed)) return;
        const size_t n = std::min<size_t>(chunk, r.end - from);
        const auto* source = reinterpret_cast<const uint8_t*>(from);
        uint8_t* to = m_region + r.offset + (from - r.begin);
        std::memcpy(to, source, n);
        if (pieces) r.transform(to, n);
        m_copiedTo.store(from + n, std::memory_order_release);
        if (m_release) m_release(source, n);
      }
      if (r.transform && !pieces) r.transform(m_region + r.offset, r.end - r.begin);
    }
    m_copiedTo.store(0, std::memory_order_relaxed);
    m_copied.store(unit + 1, std::memory_order_release);
    if (m_onCopied) m_onCopied(unit + 1, unit + 1 == m_units);
  }
}

size_t WeightArena::copiedUnits() const { return m_copied.load(std::memory_order_acquire); }

void WeightArena::wait() {
  if (m_thread.joinable()) m_thread.join();
}

void WeightArena::stop() {
  m_stop.store(true, std::memory_order_relaxed);
  wait();
}

const WeightArena::Range* WeightArena::rangeOf(const uint8_t* p) const {
  if (!m_region || p == nullptr) return nullptr;
  const auto a = reinterpret_cast<uintptr_t>(p);
  // The last range starting at or before a.
  auto it = std::upper_bound(m_ranges.begin(), m_ranges.end(), a,
                             [](uintptr_t v, const Range& r) { return v < r.begin; });
  if (it == m_ranges.begin()) return nullptr;
  --it;
  return a < it->end ? &*it : nullptr;
}

const uint8_t* WeightArena::remap(const uint8_t* p) const {
  const Range* r = rangeOf(p);
  if (r == nullptr || r->unit >= copiedUnits()) return p;
  return m_region + r->offset + (reinterpret_cast<uintptr_t>(p) - r->begin);
}

size_t WeightArena::copiedPrefix(const uint8_t* p, size_t bytes, const uint8_t** copy,
                                 bool* transformed) const {
  const Range* r = rangeOf(p);
  if (r == nullptr || (r->transform && r->granule == 0) || r->unit < copiedUnits()) return 0;
  // Within the range in flight only: m_copiedTo lies inside it while it is being copied.
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t to = m_copiedTo.load(std::memory_order_acquire);
  if (to <= a || to > r->end) return 0;
  *copy = m_region + r->offset + (a - r->begin);
  if (transformed) *transformed = static_cast<bool>(r->transform);
  return std::min<size_t>(bytes, to - a);
}

bool WeightArena::transformed(const uint8_t* p) const {
  const Range* r = rangeOf(p);
  return r != nullptr && r->transform && r->unit < copiedUnits();
}

size_t WeightArena::transformedRanges() const {
  if (!m_region) return 0;
  const size_t copied = copiedUnits();
  return static_cast<size_t>(std::count_if(m_ranges.begin(), m_ranges.end(), [&](const Range& r) {
    return r.transform && r.unit < copied;
  }));
}

void WeightArena::forEachRange(size_t unit,
                               const std::function<void(const uint8_t*, size_t)>& fn) const {
  if (!m_region) return;
  for (const Range& r : m_ranges) {
    if (r.unit == unit) fn(reinterpret_cast<const uint8_t*>(r.begin), r.end - r.begin);
  }
}

}  // namespace shoal::cpu
