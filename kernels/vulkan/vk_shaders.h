#pragma once
// The compute shaders, compiled to SPIR-V at build time and embedded in the binary
// (kernels/vulkan/CMakeLists.txt, embed_spirv.cmake).

#include <cstdint>
#include <span>
#include <string_view>

namespace shoal::vulkan {

struct EmbeddedShader {
  const char* name;      // "matvec_q4_1", "rms_norm", ...
  const uint32_t* code;  // SPIR-V words
  size_t words;
};

std::span<const EmbeddedShader> embeddedShaders();

}  // namespace shoal::vulkan
