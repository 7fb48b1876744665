// GGUF v3 writer; the layout it produces is documented at the parser (gguf_file.cpp).

#include "engine/gguf/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "engine/error.h"

namespace shoal::gguf {

namespace {

constexpr uint32_t kVersion = 3;
constexpr size_t kDefaultAlignment = 32;

// resize + memcpy rather than insert(): GCC 12 reports a false stringop-overflow on the latter.
void putBytes(std::vector<uint8_t>& out, const void* data, size_t size) {
  if (size == 0) return;
  const size_t at = out.size();
  out.resize(at + size);
  std::memcpy(out.data() + at, data, size);
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  putBytes(out, &v, sizeof(T));
}

void putString(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  putBytes(out, s.data(), s.size());
}

[[noreturn]] void badValue(const std::string& key, const std::string& what) {
  throw Error("gguf writer: key " + key + ": " + what);
}

uint64_t unsignedOf(const Value& v, const std::string& key, uint64_t max) {
  const auto u = v.asUInt();
  if (!u || *u > max || v.type == ValueType::Bool) {
    badValue(key, std::string(valueTypeName(v.type)) + " value missing or out of range");
  }
  return *u;
}

int64_t signedOf(const Value& v, const std::string& key, int64_t min, int64_t max) {
  const auto i = v.asInt();
  if (!i || *i < min || *i > max || v.type == ValueType::Bool) {
    badValue(key, std::string(valueTypeName(v.type)) + " value missing or out of range");
  }
  return *i;
}

// Encodes the payload of a value (no type tag); arrays carry their element type and count.
void putValue(std::vector<uint8_t>& out, const Value& v, const std::string& key) {
  switch (v.type) {
    case ValueType::UInt8:
      return put<uint8_t>(out, static_cast<uint8_t>(unsignedOf(v, key, UINT8_MAX)));
    case ValueType::Int8:
      return put<int8_t>(out, static_cast<int8_t>(signedOf(v, key, INT8_MIN, INT8_MAX)));
    case ValueType::UInt16:
      return put<uint16_t>(out, static_cast<uint16_t>(unsignedOf(v, key, UINT16_MAX)));
    case ValueType::Int16:
      return put<int16_t>(out, static_cast<int16_t>(signedOf(v, key, INT16_MIN, INT16_MAX)));
    case ValueType::UInt32:
      return put<uint32_t>(out, static_cast<uint32_t>(unsignedOf(v, key, UINT32_MAX)));
    case ValueType::Int32:
      return put<int32_t>(out, static_cast<int32_t>(signedOf(v, key, INT32_MIN, INT32_MAX)));
    case ValueType::UInt64:
      return put<uint64_t>(out, unsignedOf(v, key, UINT64_MAX));
    case ValueType::Int64:
      return put<int64_t>(out, signedOf(v, key, INT64_MIN, INT64_MAX));
    case ValueType::Float32:
    case ValueType::Float64: {
      const auto* d = std::get_if<double>(&v.data);
      if (!d) badValue(key, "float value does not hold a number");
      if (v.type == ValueType::Float32) return put<float>(out, static_cast<float>(*d));
      return put<double>(out, *d);
    }
    case ValueType::Bool: {
      const auto b = v.asBool();
      if (!b) badValue(key, "bool value does not hold a bool");
      return put<uint8_t>(out, *b ? 1 : 0);
    }
    case ValueType::String: {
      const std::string* s = v.asString();
      if (!s) badValue(key, "string value does not hold a string");
      return putString(out, *s);
    }
    case ValueType::Array: {
      const Array* a = v.asArray();
      if (!a) badValue(key, "array value does not hold an array");
      put<uint32_t>(out, static_cast<uint32_t>(a->elementType));
      put<uint64_t>(out, a->items.size());
      for (const Value& item : a->items) {
        if (item.type != a->elementType) {
          badValue(key, "array of " + std::string(valueTypeName(a->elementType)) + " holds a " +
                            std::string(valueTypeName(item.type)));
        }
        putValue(out, item, key);
      }
      return;
    }
  }
  badValue(key, "unknown value type " + std::to_string(static_cast<uint32_t>(v.type)));
}

size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Buffered writes to a file descriptor.
class FdSink {
 public:
  explicit FdSink(int fd, std::string name) : m_fd(fd), m_name(std::move(name)) {}
  void write(const uint8_t* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(m_fd, data, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw Error(m_name + ": write failed: " + std::strerror(errno));
      }
      data += n;
      size -= static_cast<size_t>(n);
    }
  }

 private:
  int m_fd;
  std::string m_name;
};

}  // namespace

void Writer::set(const std::string& key, Value value) {
  for (auto& [k, v] : m_metadata) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  m_metadata.emplace_back(key, std::move(value));
}

void Writer::checkNewTensor(const std::string& name, TensorType type,
                            const std::vector<int64_t>& dims) const {
  const std::string ctx = "gguf writer: tensor " + name + ": ";
  if (!typeTraits(static_cast<uint32_t>(type))) {
    throw Error(ctx + "unknown type " + std::to_string(static_cast<uint32_t>(type)));
  }
  if (dims.empty() || dims.size() > 4) {
    throw Error(ctx + std::to_string(dims.size()) + " dimensions (must be 1..4)");
  }
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d <= 0) throw Error(ctx + "dimension " + std::to_string(d) + " is not positive");
    if (__builtin_mul_overflow(elements, d, &elements)) {
      throw Error(ctx + "element count overflows");
    }
  }
  const TypeTraits t = typeTraits(type);
  if (dims[0] % t.blockSize != 0) {
    throw Error(ctx + "row length " + std::to_string(dims[0]) + " is not a multiple of the " +
                std::string(t.name) + " block size " + std::to_string(t.blockSize));
  }
  for (const PendingTensor& p : m_tensors) {
    if (p.name == name) throw Error(ctx + "added twice");
  }
}

void Writer::addTensor(const std::string& name, TensorType type, std::vector<int64_t> dims,
                       std::vector<uint8_t> bytes) {
  checkNewTensor(name, type, dims);
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  const size_t expected = rowBytes(type, dims[0]) * static_cast<size_t>(rows);
  if (bytes.size() != expected) {
    throw Error("gguf writer: tensor " + name + ": " + std::to_string(bytes.size()) +
                " bytes given, " + std::to_string(expected) + " expected for " + typeName(type));
  }
  m_tensors.push_back(PendingTensor{name, type, std::move(dims), std::move(bytes), {}, expected});
}

void Writer::addTensorStreamed(const std::string& name, TensorType type, std::vector<int64_t> dims,
                               RowFiller fill) {
  checkNewTensor(name, type, dims);
  if (!fill) throw Error("gguf writer: tensor " + name + ": no row filler");
  int64_t rows = 1;
  for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  const size_t nbytes = rowBytes(type, dims[0]) * static_cast<size_t>(rows);
  m_tensors.push_back(PendingTensor{name, type, std::move(dims), {}, std::move(fill), nbytes});
}

size_t Writer::alignment() const {
  for (const auto& [k, v] : m_metadata) {
    if (k != "general.alignment") continue;
    const auto a = v.asUInt();
    if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > (uint64_t{1} << 30)) {
      throw Error("gguf writer: general.alignment must be a power of 2 up to 2^30");
    }
    return static_cast<size_t>(*a);
  }
  return kDefaultAlignment;
}

void Writer::serialize(const Sink& sink) const {
  const size_t align = alignment();
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747);  // "GGUF"
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, m_tensors.size());
  put<uint64_t>(head, m_metadata.size());
  for (const auto& [key, value] : m_metadata) {
    putString(head, key);
    put<uint32_t>(head, static_cast<uint32_t>(value.type));
    putValue(head, value, key);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : m_tensors) {
    putString(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset += alignUp(t.nbytes, align);
  }
  head.resize(alignUp(head.size(), align), 0);
  sink(head.data(), head.size());

  const std::vector<uint8_t> zeros(align, 0);
  std::vector<uint8_t> chunk;
  for (const PendingTensor& t : m_tensors) {
    if (!t.fill) {
      sink(t.bytes.data(), t.bytes.size());
    } else {
      const size_t rowSize = rowBytes(t.type, t.dims[0]);
      const int64_t rows = static_cast<int64_t>(t.nbytes / rowSize);
      const int64_t rowsPerChunk =
          std::max<int64_t>(1, static_cast<int64_t>(kStreamChunkBytes / rowSize));
      for (int64_t first = 0; first < rows; first += rowsPerChunk) {
        const int64_t count = std::min(rowsPerChunk, rows - first);
        chunk.assign(static_cast<size_t>(count) * rowSize, 0);
        t.fill(first, count, chunk.data());
        sink(chunk.data(), chunk.size());
      }
    }
    sink(zeros.data(), alignUp(t.nbytes, align) - t.nbytes);
  }
}

std::vector<uint8_t> Writer::toBytes() const {
  std::vector<uint8_t> out;
  serialize([&](const uint8_t* data, size_t size) { putBytes(out, data, size); });
  return out;
}

void Writer::write(const std::filesystem::path& path) const {
  const std::filesystem::path tmp =
      path.string() + ".tmp-" + std::to_string(static_cast<long>(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp.string() + ": cannot create: " + std::strerror(errno));
  bool closed = false;
  try {
    FdSink fdSink(fd, tmp.string());
    // Coalesce the many small header writes and stream chunks into ~1 MiB writes.
    std::vector<uint8_t> buffer;
    buffer.reserve(size_t{1} << 20);
    serialize([&](const uint8_t* data, size_t size) {
      if (buffer.size() + size > buffer.capacity()) {
        fdSink.write(buffer.data(), buffer.size());
        buffer.clear();
      }
      if (size >= buffer.capacity()) {
        fdSink.write(data, size);
      } else {
        putBytes(buffer, data, size);
      }
    });
    fdSink.write(buffer.data(), buffer.size());
    if (::fsync(fd) != 0) throw Error(tmp.string() + ": fsync failed: " + std::strerror(errno));
    closed = true;
    if (::close(fd) != 0) throw Error(tmp.string() + ": close failed: " + std::strerror(errno));
  } catch (...) {
    if (!closed) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(path.string() + ": cannot rename from " + tmp.string() + ": " + std::strerror(err));
  }
}

}  // namespace shoal::gguf
