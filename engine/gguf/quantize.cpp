// Reference quantizers (placeholder: plain types only until the block quantizers land).
#include <string>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/quant_common.h"

namespace shoal::gguf {

void quantizeRow(TensorType type, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::F32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) storeU16(out + 2 * i, floatToHalf(src[i]));
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) storeU16(out + 2 * i, floatToBf16(src[i]));
      return;
    default:
      throw Error("quantizeRow: type " + typeName(type) + " is not supported yet");
  }
}

}  // namespace shoal::gguf
