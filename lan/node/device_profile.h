#pragma once
// A node's measured compute figures: what node_info reports as bandwidth_bytes_per_s and
// flops_per_s, and the planner (engine/plan) uses as a device's B and P instead of the
// coordinator's conservative fallbacks (lan/pool/pool_builder.h).
//
// The CPU is measured at node start with three short probes (about 0.5 s together): a
// multi-threaded read of a buffer larger than the caches and a one-token Q4_0 product of a matrix
// larger than the caches through the same kernels a stage runs, the lower of the two being the
// rate a decode reads weights at (B: memory bound on many threads, kernel bound on one or two),
// and a Q4_0 matmul of a batch of activations (P). Entries cached before the decode probe existed
// (no "probe": 2) are measured again.
// Figures are cached in the config dir, keyed by the device's name, which for the CPU is
// "<CPU model> (<N> threads)": a later start with the same CPU and thread count is instant, and
// another machine with a copied config dir or another --threads measures again.

#include <filesystem>
#include <functional>
#include <string>

#include "engine/plan/types.h"

namespace shoal::lan {

struct DeviceProfile {
  double bandwidthBytesPerS = 0;  // the rate decoding reads weights at (memory or kernels)
  double flopsPerS = 0;           // sustained FLOP/s of a quantized matmul
};

// The cache file in a config dir.
inline constexpr const char* kDeviceProfilesFile = "device_profiles.json";

// Runs both CPU probes with `threads` threads (<= 0: one per physical core). Figures > 0.
DeviceProfile measureCpuProfile(int threads);

// The cached profile for `key` from configDir/device_profiles.json; when absent, unreadable,
// not positive, or `remeasure` (--reprofile) is set, calls `measure` and stores its result
// (other keys in the file are kept). A cache that cannot be written is not an error: the figures
// are still returned (and measured again at the next start).
DeviceProfile cachedProfile(const std::filesystem::path& configDir, const std::string& key,
                            bool remeasure, const std::function<DeviceProfile()>& measure);

// This computer as a one-device pool, for fit estimates (plan::estimateFit) made before a model
// is downloaded or loaded: the CPU with the memory free now and its profile from configDir's
// cache under the key shoal-node uses ("cpu: <CPU name>"), so the node, the app and the CLI
// measure once per machine. Within one process the profile is read (or measured, under 0.5 s)
// once. Thread-safe; when the CPU cannot be probed the pool builder's fallback figures are used.
plan::Pool thisComputerPool(const std::filesystem::path& configDir);

}  // namespace shoal::lan
