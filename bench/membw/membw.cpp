// shoal_membw: DRAM read bandwidth with T threads, the hardware limit a memory-bound decode is
// measured against (bench/compare_llamacpp.py's roofline field, bench/issue3_figures.sh).
//
//   shoal_membw [--threads 2] [--mib 2048] [--repeats 9]
//
// Each thread owns one contiguous slice of a buffer much larger than the last-level cache,
// writes it once (so its pages are resident and local), then every repeat reads all slices
// with 256-bit loads summed into independent accumulators, all threads released together and
// timed until the last one finishes. Prints one JSON object; bandwidth in GiB/s (2^30 bytes).
// Exit status: 0 measured, 2 bad command line, 1 the buffer could not be allocated.

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr size_t kAlign = 4096;

struct Options {
  int threads = 2;
  size_t mib = 2048;  // well past the 480 MiB LLC the CPU reports on the dev VM
  int repeats = 9;
};

// Sums a slice of 64-bit words. The sum is returned so the loads cannot be optimized away.
uint64_t sumScalar(const uint64_t* p, size_t words) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= words; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

#if defined(__x86_64__)
// Eight independent accumulators of one 256-byte step, so the loop is bound by the loads, not
// by the adds' latency. words is a multiple of 32 (the slices are page-sized multiples).
__attribute__((target("avx2"))) uint64_t sumAvx2(const uint64_t* p, size_t words) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  const auto* v = reinterpret_cast<const __m256i*>(p);
  const size_t steps = words / 32;
  for (size_t s = 0; s < steps; ++s, v += 8) {
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_add_epi64(acc[k], _mm256_load_si256(v + k));
  }
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_add_epi64(acc[0], acc[k]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

bool haveAvx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

uint64_t sumSlice(const uint64_t* p, size_t words, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return sumAvx2(p, words);
#endif
  (void)avx2;
  return sumScalar(p, words);
}

// Parses a positive integer option value; false if it is not one.
bool parsePositive(const char* text, long long& out) {
  char* end = nullptr;
  out = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && out > 0;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "shoal_membw: %s\nusage: shoal_membw [--threads N] [--mib M] [--repeats R]\n", why);
  return 2;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: shoal_membw [--threads N] [--mib M] [--repeats R]\n");
      return 0;
    }
    if (i + 1 >= argc) return usage(("missing value for " + arg).c_str());
    long long v = 0;
    if (!parsePositive(argv[i + 1], v)) return usage(("bad value for " + arg).c_str());
    ++i;
    if (arg == "--threads" && v <= 1024) {
      opt.threads = static_cast<int>(v);
    } else if (arg == "--mib" && v <= (1 << 20)) {
      opt.mib = static_cast<size_t>(v);
    } else if (arg == "--repeats" && v <= 1000) {
      opt.repeats = static_cast<int>(v);
    } else {
      return usage(("unknown option or value out of range: " + arg).c_str());
    }
  }

  const size_t threads = static_cast<size_t>(opt.threads);
  // Whole pages per thread, so every slice is aligned and a multiple of the 256-byte step.
  const size_t slice = std::max<size_t>(opt.mib * (1u << 20) / threads / kAlign, 1) * kAlign;
  const size_t bytes = slice * threads;
  auto* buffer = static_cast<uint64_t*>(std::aligned_alloc(kAlign, bytes));
  if (!buffer) {
    std::fprintf(stderr, "shoal_membw: cannot allocate %zu bytes\n", bytes);
    return 1;
  }
  const bool avx2 = haveAvx2();
  const size_t words = slice / sizeof(uint64_t);

  using Clock = std::chrono::steady_clock;
  std::vector<double> seconds;
  std::vector<uint64_t> sums(threads);
  Clock::time_point start;
  // Phase 0 of each round: all threads meet, the main thread takes the start time; phase 1:
  // all have finished their slice.
  std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t* mine = buffer + t * words;
      for (size_t i = 0; i < words; ++i) mine[i] = i ^ t;  // first touch from the owner
      sync.arrive_and_wait();
      for (int r = 0; r < opt.repeats + 1; ++r) {
        sync.arrive_and_wait();
        sums[t] += sumSlice(mine, words, avx2);
        sync.arrive_and_wait();
      }
    });
  }
  sync.arrive_and_wait();  // buffer written
  for (int r = 0; r < opt.repeats + 1; ++r) {
    sync.arrive_and_wait();
    start = Clock::now();
    sync.arrive_and_wait();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (r > 0) seconds.push_back(s);  // the first round warms the TLB and the cores' clocks
  }
  for (std::thread& th : pool) th.join();
  std::free(buffer);

  std::vector<double> gibs;
  for (double s : seconds) gibs.push_back(static_cast<double>(bytes) / s / (1u << 30));
  uint64_t check = 0;
  for (uint64_t s : sums) check += s;

  std::printf("{\n  \"threads\": %d,\n  \"bytes\": %zu,\n  \"repeats\": %d,\n  \"isa\": \"%s\",\n",
              opt.threads, bytes, opt.repeats, avx2 ? "avx2" : "scalar");
  std::printf("  \"gib_per_s_median\": %.3f,\n  \"gib_per_s_min\": %.3f,\n", median(gibs),
              *std::min_element(gibs.begin(), gibs.end()));
  std::printf(
      "  \"gib_per_s_max\": %.3f,\n  \"bytes_per_s_median\": %.0f,\n  \"samples_gib_per_s\": [",
      *std::max_element(gibs.begin(), gibs.end()), median(gibs) * (1u << 30));
  for (size_t i = 0; i < gibs.size(); ++i) std::printf("%s%.3f", i ? ", " : "", gibs[i]);
  std::printf("],\n  \"checksum\": %llu\n}\n", static_cast<unsigned long long>(check));
  return 0;
}
