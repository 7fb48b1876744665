#pragma once
// The weight bytes a CPU stage multiplies, copied out of the GGUF file mapping into anonymous
// memory backed by transparent huge pages, so that decode's weight stream walks 2 MiB pages.
//
// Why: decode reads every weight once per token, ahead of use with software prefetches (gemmK in
// x86_kquant_kernels.h, the pair tiles in avx512_quant_gemm.cpp). Over 4 KiB pages of the file
// mapping each prefetch may first need a page walk, which the prefetch waits for; on the Intel
// Xeon development VM (2 cores, 27 GiB/s DRAM reads, no effective hardware prefetch) the 1B
// Q4_K model decoded at 37-38 tok/s from the mapping and 42-43 from huge pages (2 threads).
//
// Memory stays one copy: each source range is released from the process's resident set as soon
// as it is copied (gguf::File::releasePages), so the peak resident size grows by at most one
// chunk (kChunkBytes) over what the mapping alone would have reached. The copy is skipped (the
// stage reads the mapping as before) when transparent huge pages are off ("never"), when the
// weights would take more than kMaxShareOfAvailable of MemAvailable, or when SHOAL_CPU_WEIGHTS
// is "mapped".

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/thread_pool.h"

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

  // Copies the added ranges (merged where they overlap or touch) into one huge-page region, on
  // the pool's threads when one is given, calling release(source, bytes) for each chunk of the
  // source once it is copied (from any of those threads). Returns false, copying nothing, when
  // the copy is skipped (see above) or the region cannot be mapped.
  using Release = std::function<void(const uint8_t*, size_t)>;
  bool build(const Release& release, ThreadPool* pool = nullptr);

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
