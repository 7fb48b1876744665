#pragma once
// Real devices for the planner simulator: memory, memory bandwidth and peak FP16 throughput from
// the vendors' public spec sheets (rounded; dense tensor-core FP16 with FP32 accumulate where a
// GPU has tensor cores, shader FP16 otherwise, FP32 where FP16 is crippled or for CPUs).

#include <span>
#include <string_view>

namespace shoal::plan_sim {

enum class DeviceKind {
  ConsumerGpu,    // discrete desktop GPU
  DatacenterGpu,  // A100, H100, L4, P40
  AppleSilicon,   // unified memory; the GPU may use part of it
  IntegratedGpu,  // shares the laptop's / APU's RAM
  Cpu,            // desktop CPU with its system RAM
};

struct DeviceSpec {
  std::string_view name;
  DeviceKind kind;
  double memoryGB;      // on the spec sheet (system RAM share for iGPUs and CPUs)
  double bandwidthGBs;  // peak memory bandwidth
  double fp16Tflops;    // peak dense FP16 (see above)
  // Part of the memory a model may use: driver, OS and compute buffers take the rest.
  double usableFraction() const;
};

// The whole table, in a fixed order.
std::span<const DeviceSpec> deviceSpecs();
// By name; throws std::out_of_range for a name not in the table.
const DeviceSpec& deviceSpec(std::string_view name);

}  // namespace shoal::plan_sim
