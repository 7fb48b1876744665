#pragma once
// The weight bytes a CPU stage multiplies, copied out of the GGUF file mapping into anonymous
// memory backed by transparent huge pages, in the background, unit by unit (the reader numbers
// the units; CpuStage makes each tensor one), so that decode's weight stream walks 2 MiB pages of
// memory that reads at full speed.
//
// Why a copy: decode reads every weight once per token, ahead of use with software prefetches
// (gemmK in x86_kquant_kernels.h, the pair tiles in avx512_quant_gemm.cpp). Over 4 KiB pages of
// the file mapping each prefetch may first need a page walk, which the prefetch waits for. On the
// Intel Xeon development VM (2 cores, 27 GiB/s DRAM reads, no effective hardware prefetch), with
// the model file in the page cache in small folios (as a writer of small writes leaves it), the
// 1B Q4_K model decoded at 34-35 tok/s from the mapping and 40-41 from the copy, Q5_K at 27 and
// 32 (2 threads). Even where the page cache is in 2 MiB folios and mapped with PMDs (a cold read
// through gguf::File's mapping, which is 2 MiB-aligned with MADV_HUGEPAGE), the copy reads
// faster there: one core streamed the page-cache pages at 12.0 GB/s and the copy at 14.1, and
// Q5_K decoded at 29.7 against 33.3 tok/s (a VM's host backs the two differently). On an AMD
// EPYC (Zen 4) VM, Q5_K decoded at 30.0-32.5 tok/s from the mapping and 33.5-33.7 from the copy.
//
// Why in the background: making the copy costs the first touch of every fresh page (the kernel
// zeroing it and, under a hypervisor, the host backing it): 1.1 s for 706 MB on the Xeon VM, and
// 1.6-1.9 s for 740 MB on the EPYC one, two to five times llama.cpp's whole start-up. Copying
// behind the first forward passes instead keeps start-up at the mapping's (the passes read the
// mapping until their units are adopted). The copying thread runs at the lowest priority, so it
// takes only the time the passes leave (weight_arena.cpp, copyAll), after the units the reader
// calls urgent.
//
// The contract with the reader (CpuStage): units are copied in increasing order on a thread of
// the arena's own; after each one it calls the onCopied callback (on that thread).
// Whenever the reader is not reading a unit's weights (between forward passes, or between layers),
// it may adopt every unit below copiedUnits(): point its ops at remap()'s addresses and give the
// source back with forEachRange (gguf::File::releasePages). The source can also be given back
// chunk by chunk as it is copied (start's release), so the resident size stays about one copy:
// on top of it only what a reader faults back in before it adopts the unit.
//
// The copy is skipped (the stage reads the mapping) when transparent huge pages are off
// ("never"), when the weights would take more than kMaxShareOfAvailable of MemAvailable, or when
// SHOAL_CPU_WEIGHTS is "mapped".

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace shoal::cpu {

class WeightArena {
 public:
  // Bytes copied between checks of a stop request.
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  // The copy is made only if the weights take at most this share of MemAvailable.
  static constexpr double kMaxShareOfAvailable = 0.8;

  WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;
  ~WeightArena();  // stops the copy (within one chunk) and frees it

  // Rewrites bytes of a range in the copy, in place, before they are read there (CpuStage: a
  // matrix's rows into row groups, row_groups.h): `copy` is the start of a piece of the range,
  // whole granules (add) long.
  using Transform = std::function<void(uint8_t* copy, size_t bytes)>;

  // Marks [p, p + bytes) as read by the stage as part of `unit` (before start). Ranges may
  // overlap or repeat, within a unit or across units; overlapping ones are copied once, with
  // the lowest unit that reads them. A transform is applied only to a range that no other range
  // overlaps or touches (else the other's readers would find rewritten bytes); transformed()
  // says whether it was. With a granule (bytes a multiple of it), the transform rewrites each
  // chunk of the copy as it is copied, whole granules at a time, so that the part in the copy
  // can be read there while the rest is under way (copiedPrefix); without one (0), the whole
  // range at once after it is copied.
  void add(size_t unit, const uint8_t* p, size_t bytes, Transform transform = {},
           size_t granule = 0);

  // Plans the copy and starts it; onCopied(copiedUnits, last) is called on the copying thread
  // after each unit, `last` after the final one, and release(source, bytes) after each chunk (at
  // most kChunkBytes) of source is copied, so that the caller can give the source's pages back
  // at once rather than after its unit (a reader still reading the source must find it intact:
  // gguf::File::releasePages only drops pages that faulting reads back in). Units below
  // urgentUnits are copied at the thread's normal priority, the rest at the lowest. Returns
  // false, copying nothing, when the copy is skipped (see above) or its memory cannot be mapped.
  using OnCopied = std::function<void(size_t copiedUnits, bool last)>;
  using Release = std::function<void(const uint8_t* source, size_t bytes)>;
  bool start(OnCopied onCopied = {}, Release release = {}, size_t urgentUnits = 0);

  // Units [0, copiedUnits()) are in the copy (an acquire: their bytes are visible after it).
  size_t copiedUnits() const;
  size_t units() const { return m_units; }  // 1 + the highest unit added
  // Until every unit is copied (or the copy stopped). Returns at once if never started.
  void wait();
  // Stops the copy after the chunk in hand and waits for the copying thread; copiedUnits()
  // stays where it got to. The destructor does this first.
  void stop();

  // Where p, inside an added range, is now: in the copy if its unit is copied, p itself if not.
  const uint8_t* remap(const uint8_t* p) const;
  // For [p, p + bytes) inside the range being copied now (a unit not yet published): how many
  // of its first bytes are already in the copy, at *copy, transformed if the range has a
  // transform (*transformed, when given, says so). 0 for any other range, and for one with a
  // transform but no granule (its bytes change once it is whole). A reader may read that prefix
  // from the copy while the unit is under way: its source pages are released as they are
  // copied, and reading them there would fault them back in (the unit held twice).
  size_t copiedPrefix(const uint8_t* p, size_t bytes, const uint8_t** copy,
                      bool* transformed = nullptr) const;
  // Calls fn(source, bytes) for each (merged) range copied with `unit`.
  void forEachRange(size_t unit, const std::function<void(const uint8_t*, size_t)>& fn) const;

  size_t bytes() const { return m_used; }  // bytes the copy takes (0 unless started)

  // Whether p (a source address) lies in a range whose transform has been applied in the copy
  // (its unit copied); false before start, outside the ranges, or where the copy kept the bytes
  // as they were.
  bool transformed(const uint8_t* p) const;
  // Ranges whose transform has been applied so far.
  size_t transformedRanges() const;

 private:
  struct Range {
    uintptr_t begin = 0, end = 0;  // source, half-open
    size_t unit = 0;               // copied with this unit
    size_t offset = 0;             // of begin in the region
    Transform transform;           // applied after the copy (empty: none)
    size_t granule = 0;            // the transform's piece (0: the whole range at once)
  };
  void copyAll(bool ownThread);  // the copying thread (or the caller's, when none can be had)
  // The range holding source address p (nullptr: none, or not started).
  const Range* rangeOf(const uint8_t* p) const;

  std::vector<Range> m_ranges;  // sorted and merged by start
  size_t m_units = 0;
  uint8_t* m_region = nullptr;  // the 2 MiB-aligned copy
  void* m_mapping = nullptr;    // what munmap gets (m_region lies inside)
  size_t m_mappingBytes = 0;
  size_t m_used = 0;
  OnCopied m_onCopied;
  Release m_release;
  size_t m_urgentUnits = 0;
  std::atomic<size_t> m_copied{0};
  // Source address up to which the range being copied is in the copy (a release store after
  // each chunk; 0 between ranges).
  std::atomic<uintptr_t> m_copiedTo{0};
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

}  // namespace shoal::cpu
