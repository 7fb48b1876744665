#include "bench/plan_sim/device_specs.h"

#include <array>
#include <stdexcept>
#include <string>

namespace shoal::plan_sim {
namespace {

// name, kind, memory GB, bandwidth GB/s, FP16 TFLOPS.
constexpr std::array kSpecs = {
    // NVIDIA GeForce (Ada, Ampere, Turing, Pascal): tensor FP16 with FP32 accumulate.
    DeviceSpec{"RTX 4090", DeviceKind::ConsumerGpu, 24, 1008, 165.2},
    DeviceSpec{"RTX 4080", DeviceKind::ConsumerGpu, 16, 717, 97.5},
    DeviceSpec{"RTX 4070", DeviceKind::ConsumerGpu, 12, 504, 58.3},
    DeviceSpec{"RTX 4060 Ti 16GB", DeviceKind::ConsumerGpu, 16, 288, 44.1},
    DeviceSpec{"RTX 3090", DeviceKind::ConsumerGpu, 24, 936, 71.0},
    DeviceSpec{"RTX 3080", DeviceKind::ConsumerGpu, 10, 760, 59.5},
    DeviceSpec{"RTX 3060 12GB", DeviceKind::ConsumerGpu, 12, 360, 25.6},
    DeviceSpec{"RTX 2080 Ti", DeviceKind::ConsumerGpu, 11, 616, 53.8},
    DeviceSpec{"GTX 1080 Ti", DeviceKind::ConsumerGpu, 11, 484, 11.3},  // FP32: FP16 is 1/64 rate
    // AMD Radeon (RDNA3 WMMA / RDNA2 packed FP16), Intel Arc (XMX).
    DeviceSpec{"RX 7900 XTX", DeviceKind::ConsumerGpu, 24, 960, 122.8},
    DeviceSpec{"RX 7900 XT", DeviceKind::ConsumerGpu, 20, 800, 103.0},
    DeviceSpec{"RX 6800 XT", DeviceKind::ConsumerGpu, 16, 512, 41.5},
    DeviceSpec{"Arc A770 16GB", DeviceKind::ConsumerGpu, 16, 560, 138.0},
    // Datacenter.
    DeviceSpec{"A100 80GB SXM", DeviceKind::DatacenterGpu, 80, 2039, 312.0},
    DeviceSpec{"A100 40GB PCIe", DeviceKind::DatacenterGpu, 40, 1555, 312.0},
    DeviceSpec{"H100 SXM", DeviceKind::DatacenterGpu, 80, 3350, 989.4},
    DeviceSpec{"H100 PCIe", DeviceKind::DatacenterGpu, 80, 2000, 756.0},
    DeviceSpec{"L4", DeviceKind::DatacenterGpu, 24, 300, 121.0},
    DeviceSpec{"Tesla P40", DeviceKind::DatacenterGpu, 24, 347, 11.8},  // FP32
    // Apple M-series: unified memory, GPU FP32 = FP16 rate.
    DeviceSpec{"M1 Pro 32GB", DeviceKind::AppleSilicon, 32, 200, 5.2},
    DeviceSpec{"M2 Max 64GB", DeviceKind::AppleSilicon, 64, 400, 13.6},
    DeviceSpec{"M3 Max 128GB", DeviceKind::AppleSilicon, 128, 400, 16.4},
    DeviceSpec{"M4 Pro 48GB", DeviceKind::AppleSilicon, 48, 273, 9.2},
    DeviceSpec{"M2 Ultra 192GB", DeviceKind::AppleSilicon, 192, 800, 27.2},
    // Integrated GPUs with the share of RAM they are given.
    DeviceSpec{"Radeon 780M", DeviceKind::IntegratedGpu, 16, 89.6, 16.6},  // DDR5-5600 x2
    DeviceSpec{"Iris Xe 96EU", DeviceKind::IntegratedGpu, 8, 68.3, 4.2},   // LPDDR4x-4266
    // Desktop CPUs with their RAM: dual-channel bandwidth, FP32 FMA peak.
    DeviceSpec{"Ryzen 9 7950X", DeviceKind::Cpu, 64, 83.2, 2.56},  // DDR5-5200, AVX-512
    DeviceSpec{"Core i7-12700K", DeviceKind::Cpu, 32, 51.2, 1.2},  // DDR4-3200
    DeviceSpec{"Ryzen 7 5800X", DeviceKind::Cpu, 32, 51.2, 1.15},  // DDR4-3200
};

}  // namespace

double DeviceSpec::usableFraction() const {
  switch (kind) {
    case DeviceKind::ConsumerGpu:
    case DeviceKind::DatacenterGpu:
      return 0.92;  // CUDA/ROCm context and compute buffers
    case DeviceKind::AppleSilicon:
      return 0.70;  // macOS lets the GPU wire about 2/3 to 3/4 of RAM by default
    case DeviceKind::IntegratedGpu:
      return 0.90;
    case DeviceKind::Cpu:
      return 0.75;  // the OS and the user's applications
  }
  return 0.9;
}

std::span<const DeviceSpec> deviceSpecs() { return kSpecs; }

const DeviceSpec& deviceSpec(std::string_view name) {
  for (const DeviceSpec& s : kSpecs) {
    if (s.name == name) return s;
  }
  throw std::out_of_range("no device spec named " + std::string(name));
}

}  // namespace shoal::plan_sim
