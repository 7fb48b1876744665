#include "engine/gguf/gguf_value.h"

#include <limits>
#include <utility>

namespace shoal::gguf {

std::string_view valueTypeName(ValueType type) {
  switch (type) {
    case ValueType::UInt8:
      return "u8";
    case ValueType::Int8:
      return "i8";
    case ValueType::UInt16:
      return "u16";
    case ValueType::Int16:
      return "i16";
    case ValueType::UInt32:
      return "u32";
    case ValueType::Int32:
      return "i32";
    case ValueType::Float32:
      return "f32";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::Array:
      return "array";
    case ValueType::UInt64:
      return "u64";
    case ValueType::Int64:
      return "i64";
    case ValueType::Float64:
      return "f64";
  }
  return "unknown";
}

Value Value::u8(uint8_t v) { return Value{ValueType::UInt8, uint64_t{v}}; }
Value Value::i8(int8_t v) { return Value{ValueType::Int8, int64_t{v}}; }
Value Value::u16(uint16_t v) { return Value{ValueType::UInt16, uint64_t{v}}; }
Value Value::i16(int16_t v) { return Value{ValueType::Int16, int64_t{v}}; }
Value Value::u32(uint32_t v) { return Value{ValueType::UInt32, uint64_t{v}}; }
Value Value::i32(int32_t v) { return Value{ValueType::Int32, int64_t{v}}; }
Value Value::u64(uint64_t v) { return Value{ValueType::UInt64, v}; }
Value Value::i64(int64_t v) { return Value{ValueType::Int64, v}; }
Value Value::f32(float v) { return Value{ValueType::Float32, double{v}}; }
Value Value::f64(double v) { return Value{ValueType::Float64, v}; }
Value Value::boolean(bool v) { return Value{ValueType::Bool, v}; }
Value Value::string(std::string v) { return Value{ValueType::String, std::move(v)}; }
Value Value::array(ValueType elementType, std::vector<Value> items) {
  return Value{ValueType::Array, Array{elementType, std::move(items)}};
}

std::optional<int64_t> Value::asInt() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  return std::nullopt;
}

std::optional<uint64_t> Value::asUInt() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data)) {
    if (*i < 0) return std::nullopt;
    return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<double> Value::asFloat() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Value::asBool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* Value::asString() const { return std::get_if<std::string>(&data); }

const Array* Value::asArray() const { return std::get_if<Array>(&data); }

}  // namespace shoal::gguf
