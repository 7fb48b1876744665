#pragma once
// The weight bytes a CPU stage multiplies, copied out of the GGUF file mapping into anonymous
// memory backed by transparent huge pages, so that decode's weight stream walks 2 MiB pages.
//
// Why: decode reads every weight once per token, ahead of use with software prefetches (gemmK in
// x86_kquant_kernels.h, the pair tiles in avx512_quant_gemm.cpp). Over 4 KiB pages of the file
// mapping each prefetch may first need a page walk, which the prefetch waits for. On the Intel
// Xeon development VM (2 cores, 27 GiB/s DRAM reads, no effective hardware prefetch), with the
// model file in the page cache as its writer left it (small folios), the 1B Q4_K model decoded
// at 34-35 tok/s from the mapping and 40-41 from the copy, Q5_K at 27 and 32 (2 threads). How
// much the copy gains depends on the page cache: where the kernel holds the file in 2 MiB
// folios and maps them with PMDs (Linux 6.18 ext4 did for part of a cold read), the mapping is
// nearly as fast: fully PMD-mapped, Q5_K 29.5 against 31.5 tok/s (alternated); in later runs
// with the page cache partly in 2 MiB folios (one file's mapping 53% PMD-mapped), Q4_K 40.3
// against 41.3, Q5_K 31.4 against 31.1, Q4_0 38.4 against 42.7. Copying only when the mapping
// is not PMD-mapped (smaps' FilePmdMapped) would keep start-up fast then; not done yet.
//
// Memory stays one copy: each source range is released from the process's resident set as soon
// as it is copied (gguf::File::releasePages), so the peak resident size grows by at most one
// chunk (kChunkBytes) per copying thread over what the mapping alone would have reached. The copy
// is skipped (the stage reads the mapping as before) when transparent huge pages are off ("never"),
// when the weights would take more than kMaxShareOfAvailable of MemAvailable, or when
// SHOAL_CPU_WEIGHTS is "mapped".

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace shoal::cpu {

class WeightArena {
 public:
  // Bytes copied between releases of the source: bounds the extra peak resident size.
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  // The copy is made only if the weights take at most this share of MemAvailable.
  static constexpr double kMaxShareOfAvailable = 0.8;

  WeightArena() = default;
  WeightArena(WeightArena&& other) noexcept;
  WeightArena& operator=(WeightArena&& other) noexcept;
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;
  ~WeightArena();

  // Marks [p, p + bytes) as read by the stage (before build). Ranges may overlap or repeat.
  void add(const uint8_t* p, size_t bytes);

  // Copies the added ranges (merged where they overlap or touch) into one huge-page region on
  // `threads` threads (the caller and threads - 1 of its own), calling release(source, bytes)
  // for each chunk of the source once it is copied, from any of them. Returns false, copying
  // nothing, when the copy is skipped (see above) or the region cannot be mapped.
  using Release = std::function<void(const uint8_t*, size_t)>;
  bool build(const Release& release, int threads = 1);

  // Where p, inside an added range, is now (p itself before a successful build).
  const uint8_t* remap(const uint8_t* p) const;

  size_t bytes() const { return m_used; }  // bytes in the copy (0 before build)

 private:
  struct Range {
    uintptr_t begin = 0, end = 0;  // source, half-open
    size_t offset = 0;             // of begin in the region
  };
  std::vector<Range> m_ranges;  // sorted and merged by build
  uint8_t* m_region = nullptr;  // the 2 MiB-aligned copy
  void* m_mapping = nullptr;    // what munmap gets (m_region lies inside)
  size_t m_mappingBytes = 0;
  size_t m_used = 0;
};

}  // namespace shoal::cpu
