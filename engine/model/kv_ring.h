#pragma once
// Sliding-window rings. A layer that attends over only its last `window` positions never reads
// older ones, so a stage may keep its cache as a ring: position p in slot p mod period. The
// period holds the window plus kKvRingSlack positions, which cover the new positions a stage
// writes before it attends over them (kKvRingWriteChunk at a time), the
// 64-position padding of its dot products, and a rewind of up to about kKvRingSlack positions
// behind the newest written (speculative decoding's rejected drafts; a chat turn whose last
// reply is re-rendered). A rewind further back finds the window's older positions overwritten:
// the stage then starts the sequence over (kvRingResumeFloor). Header-only: the CUDA plugin's
// stage bookkeeping uses it without linking the engine.

#include <cstdint>

namespace shoal::model {

constexpr int32_t kKvRingSlack = 512;

// Rows a stage with a ring writes (then attends over) at a time: within the slack beyond the
// window, so that each row's window is still in the ring when the row is attended. The CPU and
// Vulkan stages cut a longer segment into chunks of this many rows.
constexpr int32_t kKvRingWriteChunk = 256;
static_assert(kKvRingWriteChunk <= kKvRingSlack);

// window + kKvRingSlack, rounded up to a multiple of 64 (window > 0).
constexpr int32_t kvRingPeriod(int32_t window) {
  return static_cast<int32_t>((int64_t{window} + kKvRingSlack + 63) / 64 * 64);
}

// What a ring costs, in positions of keys and values: 1.5 periods. The CPU stage keeps keys for
// one period and values for two (kernels/cpu/attention.h: its dot products over positions must
// not be cut by the wrap); a backend without that need keeps both in a ring of 1.5 periods (the
// same bytes, more slack for rewinds). kv_footprint.h sizes windowed layers from it.
constexpr int32_t kvRingPositions(int32_t window) { return kvRingPeriod(window) / 2 * 3; }

// The ring's period where keeping one saves memory for this context (its cost is below the
// context), else 0 (the whole context).
constexpr int32_t kvRingPeriodFor(int32_t window, int32_t contextLength) {
  if (window <= 0 || window >= (int32_t{1} << 28)) return 0;
  return kvRingPositions(window) < contextLength ? kvRingPeriod(window) : 0;
}

// The lowest position > 0 a batch of a sequence may start at, for a ring of `period` positions
// over a `window`, once positions up to highWater - 1 have been written since the sequence was
// last cleared: slot p mod period holds the newest position written there, so positions below
// highWater - period are gone, and resuming at q needs [q - window + 1, q). 0 while nothing
// was overwritten.
constexpr int32_t kvRingResumeFloor(int32_t period, int32_t window, int32_t highWater) {
  return highWater > period ? highWater - period + window - 1 : 0;
}

}  // namespace shoal::model
