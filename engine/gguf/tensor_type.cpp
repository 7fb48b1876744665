#include "engine/gguf/tensor_type.h"

#include <array>
#include <cctype>

#include "engine/error.h"

namespace shoal::gguf {

namespace {

// Block sizes and byte sizes from ggml's type_traits table (ggml/src/ggml.c) and the block
// structs with their static_asserts in ggml/src/ggml-common.h. QK_K = 256.
struct Entry {
  uint32_t raw;
  TypeTraits traits;
};

constexpr int64_t kQkK = 256;

constexpr std::array kTypes = {
    Entry{0, {"f32", 1, 4, true}},           Entry{1, {"f16", 1, 2, true}},
    Entry{2, {"q4_0", 32, 18, true}},      // f16 d + 16 B nibbles
    Entry{3, {"q4_1", 32, 20, true}},      // f16 d, m + 16 B nibbles
    Entry{6, {"q5_0", 32, 22, true}},      // f16 d + u32 high bits + 16 B
    Entry{7, {"q5_1", 32, 24, true}},      // f16 d, m + u32 high bits + 16 B
    Entry{8, {"q8_0", 32, 34, true}},      // f16 d + 32 i8
    Entry{9, {"q8_1", 32, 36, true}},      // f16 d, s + 32 i8
    Entry{10, {"q2_K", kQkK, 84, true}},   // 16 scales + 64 qs + f16 d, dmin
    Entry{11, {"q3_K", kQkK, 110, true}},  // 32 hmask + 64 qs + 12 scales + f16 d
    Entry{12, {"q4_K", kQkK, 144, true}},  // f16 d, dmin + 12 scales + 128 qs
    Entry{13, {"q5_K", kQkK, 176, true}},  // f16 d, dmin + 12 scales + 32 qh + 128 qs
    Entry{14, {"q6_K", kQkK, 210, true}},  // 128 ql + 64 qh + 16 i8 scales + f16 d
    Entry{15, {"q8_K", kQkK, 292, true}},  // f32 d + 256 i8 + 16 i16 bsums
    Entry{16, {"iq2_xxs", kQkK, 66, false}}, Entry{17, {"iq2_xs", kQkK, 74, false}},
    Entry{18, {"iq3_xxs", kQkK, 98, false}}, Entry{19, {"iq1_s", kQkK, 50, false}},
    Entry{20, {"iq4_nl", 32, 18, true}},     Entry{21, {"iq3_s", kQkK, 110, false}},
    Entry{22, {"iq2_s", kQkK, 82, false}},   Entry{23, {"iq4_xs", kQkK, 136, true}},
    Entry{24, {"i8", 1, 1, false}},          Entry{25, {"i16", 1, 2, false}},
    Entry{26, {"i32", 1, 4, false}},         Entry{27, {"i64", 1, 8, false}},
    Entry{28, {"f64", 1, 8, true}},          Entry{29, {"iq1_m", kQkK, 56, false}},
    Entry{30, {"bf16", 1, 2, true}},         Entry{34, {"tq1_0", kQkK, 54, false}},
    Entry{35, {"tq2_0", kQkK, 66, false}},   Entry{39, {"mxfp4", 32, 17, true}},
};

}  // namespace

std::optional<TypeTraits> typeTraits(uint32_t rawType) {
  for (const Entry& e : kTypes) {
    if (e.raw == rawType) return e.traits;
  }
  return std::nullopt;
}

TypeTraits typeTraits(TensorType type) {
  auto t = typeTraits(static_cast<uint32_t>(type));
  if (!t) {
    throw Error("unknown tensor type " + std::to_string(static_cast<uint32_t>(type)));
  }
  return *t;
}

size_t rowBytes(TensorType type, int64_t n) {
  const TypeTraits t = typeTraits(type);
  if (n < 0 || n % t.blockSize != 0) {
    throw Error("row of " + std::to_string(n) + " elements is not a multiple of the " +
                std::string(t.name) + " block size " + std::to_string(t.blockSize));
  }
  return static_cast<size_t>(n / t.blockSize) * t.typeSize;
}

std::string typeName(TensorType type) {
  auto t = typeTraits(static_cast<uint32_t>(type));
  if (!t) return "type#" + std::to_string(static_cast<uint32_t>(type));
  return std::string(t->name);
}

std::optional<TensorType> typeFromName(std::string_view name) {
  for (const Entry& e : kTypes) {
    if (e.traits.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(name[i])) ==
             std::tolower(static_cast<unsigned char>(e.traits.name[i]));
    }
    if (same) return static_cast<TensorType>(e.raw);
  }
  return std::nullopt;
}

bool quantizable(TensorType type) {
  switch (type) {
    case TensorType::IQ4_NL:
    case TensorType::MXFP4:
    case TensorType::IQ4_XS:
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q8_1:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::Q8_K:
      return true;
    default:
      return false;
  }
}

}  // namespace shoal::gguf
