#pragma once
// A GGUF metadata value: one of the 13 GGUF value types, arrays possibly nested.
// GGUF value type ids (gguf spec, ggml/docs/gguf.md): 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
// 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace shoal::gguf {

enum class ValueType : uint32_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  UInt32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  UInt64 = 10,
  Int64 = 11,
  Float64 = 12,
};

std::string_view valueTypeName(ValueType type);

struct Value;

// An array keeps the element type it was declared with, also when it is empty.
struct Array {
  ValueType elementType = ValueType::UInt8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::UInt8;
  // Integers of every width live in i64/u64, floats in double: readers ask for what they need
  // and the accessors below convert with range checks.
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value array(ValueType elementType, std::vector<Value> items);

  // Accessors: nullopt when the value is not of a compatible kind or out of the target range.
  std::optional<int64_t> asInt() const;    // any integer type that fits int64
  std::optional<uint64_t> asUInt() const;  // any non-negative integer
  std::optional<double> asFloat() const;   // f32/f64, and integers
  std::optional<bool> asBool() const;
  const std::string* asString() const;
  const Array* asArray() const;
};

}  // namespace shoal::gguf
