// GGUF parser. The format (ggml/docs/gguf.md), all little-endian:
//
//   u32 magic            "GGUF" (bytes 47 47 55 46)
//   u32 version          2 or 3 here (v1 used u32 counts and is refused; v2 and v3 only differ
//                        in that v3 may be big-endian, which we detect and refuse)
//   u64 tensor_count
//   u64 metadata_kv_count
//   kv × { string key; u32 value_type; value }
//   tensor × { string name; u32 n_dims (1..4); u64 dims[n_dims] (dims[0] innermost);
//              u32 ggml_type; u64 offset (relative to the data section, a multiple of
//              ALIGNMENT) }
//   zero padding up to a multiple of ALIGNMENT (`general.alignment`, default 32)
//   data section: each tensor's bytes at its offset, padded to ALIGNMENT between tensors.
//
//   string = u64 byte length + bytes (UTF-8, no terminator)
//   value  = by type: u8 i8 u16 i16 u32 i32 f32 u64 i64 f64 as raw little-endian; bool = one
//            byte 0 or 1; string as above; array = u32 element type + u64 count + count values
//            of that type (arrays may nest; each nested array carries its own type and count).
//
// Validation (every field before its use, so nothing reads past the buffer):
//   counts are bounded by the bytes left (each kv, tensor info and array element has a minimum
//   encoded size); string lengths by the bytes left; array nesting by kMaxArrayDepth; the total
//   number of metadata values by kMaxMetadataValues (a 1 GB file of u8 arrays would otherwise
//   cost ~50 GB of Value objects); dims are 1..INT64_MAX with a product that fits int64; the row
//   length is a multiple of the type's block size; each tensor's data lies inside the file, is
//   aligned and overlaps no other tensor; keys and tensor names are unique.

#include "engine/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "engine/error.h"

namespace shoal::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
// A PMD-sized transparent huge page (x86-64, and arm64 with 4 KiB pages).
constexpr size_t kHugePage = size_t{2} << 20;

// Maps the whole file read-only at an address that is a multiple of 2 MiB, and advises huge
// pages for it. Why: the kernel maps a page-cache folio with one PMD (one TLB entry for 2 MiB)
// only where the folio is 2 MiB and lies 2 MiB-aligned in the address space as in the file,
// and with MADV_HUGEPAGE a fault on a file that is not yet cached reads it in as 2 MiB folios
// (Linux's do_sync_mmap_readahead). Decode reads every weight once per token ahead of use, and
// over 4 KiB pages each prefetch may wait for a page walk (weight_arena.h has the figures). Both
// are hints: where the kernel ignores them, the mapping works as a plain one. Returns MAP_FAILED
// with errno set when the file cannot be mapped.
void* mapAlignedToHugePage(int fd, size_t bytes) {
  const size_t reserveBytes = bytes + kHugePage;
  void* reserved = bytes <= std::numeric_limits<size_t>::max() - kHugePage
                       ? mmap(nullptr, reserveBytes, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                       : MAP_FAILED;
  if (reserved == MAP_FAILED) return mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const auto begin = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  void* m =
      mmap(reinterpret_cast<void*>(aligned), bytes, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    munmap(reserved, reserveBytes);
    errno = err;
    return MAP_FAILED;
  }
  // The reservation around the file mapping goes back (whole pages: bytes may end mid-page).
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t mappedEnd = (aligned + bytes + page - 1) / page * page;
  if (aligned > begin) munmap(reserved, aligned - begin);
  if (begin + reserveBytes > mappedEnd) {
    munmap(reinterpret_cast<void*>(mappedEnd), begin + reserveBytes - mappedEnd);
  }
#ifdef MADV_HUGEPAGE
  madvise(m, bytes, MADV_HUGEPAGE);  // EINVAL where the kernel has no THP: a plain mapping then
#endif
  return m;
}

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;
constexpr uint64_t kMaxKeyLength = 65535;  // gguf.md: keys are at most 2^16 - 1 bytes
constexpr size_t kDefaultAlignment = 32;

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string num(uint64_t v) { return std::to_string(v); }

// Smallest encoded size of one value of a type; bounds element counts by the bytes left.
uint64_t minEncodedSize(ValueType t) {
  switch (t) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::Bool:
      return 1;
    case ValueType::UInt16:
    case ValueType::Int16:
      return 2;
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::Float32:
      return 4;
    case ValueType::UInt64:
    case ValueType::Int64:
    case ValueType::Float64:
    case ValueType::String:
      return 8;
    case ValueType::Array:
      return 12;
  }
  return 1;
}

bool validValueType(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::Float64); }

// Bounds-checked sequential reader over the file. `size` is the whole file's size (what counts
// and lengths are checked against); `available` <= size bytes of it are in memory (all of them,
// except for a header prefix): reading past them while the file goes on is HeaderIncomplete.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t available, size_t size, const std::string& name)
      : m_data(data), m_available(available), m_size(size), m_name(name) {}

  size_t pos() const { return m_pos; }
  size_t remaining() const { return m_size - m_pos; }
  size_t available() const { return m_available - m_pos; }  // of remaining(), in memory

  [[noreturn]] void fail(const std::string& what) const { throw Error(m_name + ": " + what); }

  template <typename T>
  T read(const std::string& context, const char* field) {
    if (remaining() < sizeof(T)) {
      fail(context + field + " truncated at offset " + hex(m_pos) + " (needs " + num(sizeof(T)) +
           " bytes, file size " + num(m_size) + ")");
    }
    need(sizeof(T), context, field);
    T v;
    std::memcpy(&v, m_data + m_pos, sizeof(T));
    m_pos += sizeof(T);
    return v;
  }

  std::string readString(const std::string& context, const char* field,
                         uint64_t maxLength = std::numeric_limits<uint64_t>::max()) {
    const size_t start = m_pos;
    const uint64_t length = read<uint64_t>(context, field);
    if (length > remaining()) {
      fail(context + field + " at offset " + hex(start) + ": length " + num(length) +
           " runs beyond end of file (" + num(remaining()) + " bytes left, file size " +
           num(m_size) + ")");
    }
    need(static_cast<size_t>(length), context, field);
    if (length > maxLength) {
      fail(context + field + " at offset " + hex(start) + ": length " + num(length) +
           " exceeds the limit of " + num(maxLength));
    }
    std::string s(reinterpret_cast<const char*>(m_data + m_pos), static_cast<size_t>(length));
    m_pos += static_cast<size_t>(length);
    return s;
  }

 private:
  // The next `bytes` lie in the file; throws HeaderIncomplete when they are not in memory.
  void need(size_t bytes, const std::string& context, const char* field) const {
    if (m_available - m_pos < bytes) {
      throw HeaderIncomplete(m_name + ": " + context + field + " at offset " + hex(m_pos) +
                             " lies beyond the " + num(m_available) + " bytes read of the header");
    }
  }

  const uint8_t* m_data;
  size_t m_available;
  size_t m_size;
  size_t m_pos = 0;
  const std::string& m_name;
};

class ValueParser {
 public:
  explicit ValueParser(Cursor& cursor) : m_cursor(cursor) {}

  Value parse(ValueType type, const std::string& ctx, int depth) {
    if (++m_values > kMaxMetadataValues) {
      m_cursor.fail(ctx + "more than " + num(kMaxMetadataValues) + " metadata values in the file");
    }
    switch (type) {
      case ValueType::UInt8:
        return Value::u8(m_cursor.read<uint8_t>(ctx, "u8 value"));
      case ValueType::Int8:
        return Value::i8(m_cursor.read<int8_t>(ctx, "i8 value"));
      case ValueType::UInt16:
        return Value::u16(m_cursor.read<uint16_t>(ctx, "u16 value"));
      case ValueType::Int16:
        return Value::i16(m_cursor.read<int16_t>(ctx, "i16 value"));
      case ValueType::UInt32:
        return Value::u32(m_cursor.read<uint32_t>(ctx, "u32 value"));
      case ValueType::Int32:
        return Value::i32(m_cursor.read<int32_t>(ctx, "i32 value"));
      case ValueType::UInt64:
        return Value::u64(m_cursor.read<uint64_t>(ctx, "u64 value"));
      case ValueType::Int64:
        return Value::i64(m_cursor.read<int64_t>(ctx, "i64 value"));
      case ValueType::Float32:
        return Value::f32(m_cursor.read<float>(ctx, "f32 value"));
      case ValueType::Float64:
        return Value::f64(m_cursor.read<double>(ctx, "f64 value"));
      case ValueType::Bool: {
        const size_t at = m_cursor.pos();
        const uint8_t b = m_cursor.read<uint8_t>(ctx, "bool value");
        if (b > 1) {
          m_cursor.fail(ctx + "bool value at offset " + hex(at) + " is " + num(b) +
                        " (must be 0 or 1)");
        }
        return Value::boolean(b == 1);
      }
      case ValueType::String:
        return Value::string(m_cursor.readString(ctx, "string value"));
      case ValueType::Array:
        return parseArray(ctx, depth);
    }
    m_cursor.fail(ctx + "unknown value type " + num(static_cast<uint32_t>(type)));
  }

 private:
  Value parseArray(const std::string& ctx, int depth) {
    const size_t at = m_cursor.pos();
    if (depth >= kMaxArrayDepth) {
      m_cursor.fail(ctx + "array at offset " + hex(at) + " nested deeper than " +
                    num(kMaxArrayDepth) + " levels");
    }
    const uint32_t rawType = m_cursor.read<uint32_t>(ctx, "array element type");
    if (!validValueType(rawType)) {
      m_cursor.fail(ctx + "array at offset " + hex(at) + " has unknown element type " +
                    num(rawType));
    }
    const auto elementType = static_cast<ValueType>(rawType);
    const uint64_t count = m_cursor.read<uint64_t>(ctx, "array length");
    const uint64_t maxCount = m_cursor.remaining() / minEncodedSize(elementType);
    if (count > maxCount) {
      m_cursor.fail(ctx + "array at offset " + hex(at) + " of " + num(count) + " " +
                    std::string(valueTypeName(elementType)) + " elements cannot fit in the " +
                    num(m_cursor.remaining()) + " bytes left");
    }
    std::vector<Value> items;
    // Reserve only what the bytes in memory can hold: a header prefix is checked against the
    // size the file claims, which a hostile listing may inflate. Parsing past them throws
    // HeaderIncomplete long before a vector grows that far.
    items.reserve(static_cast<size_t>(
        std::min<uint64_t>(count, m_cursor.available() / minEncodedSize(elementType))));
    for (uint64_t i = 0; i < count; ++i) {
      items.push_back(parse(elementType, ctx, depth + 1));
    }
    return Value::array(elementType, std::move(items));
  }

  Cursor& m_cursor;
  uint64_t m_values = 0;
};

// Describes a value's type for "expected X, got Y" messages.
std::string describeType(const Value& v) {
  if (const Array* a = v.asArray()) {
    return "array of " + std::string(valueTypeName(a->elementType));
  }
  return std::string(valueTypeName(v.type));
}

bool mulOverflows(uint64_t a, uint64_t b, uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

}  // namespace

// ---- TensorInfo ---------------------------------------------------------------------------

int64_t TensorInfo::elementCount() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

// ---- File ---------------------------------------------------------------------------------

struct File::Impl {
  std::string displayName;
  const uint8_t* data = nullptr;
  size_t size = 0;          // the whole file's size
  size_t available = 0;     // bytes of it at `data`: size, or less for a header prefix
  bool headerOnly = false;  // fromHeader: no tensor data, TensorInfo::data stays nullptr
  void* mapping = nullptr;  // owned when non-null (open); null for fromBuffer
  size_t mappingSize = 0;
  uint32_t version = 0;
  size_t alignment = kDefaultAlignment;
  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> keyIndex;
  std::unordered_map<std::string, size_t> tensorIndex;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (mapping) munmap(mapping, mappingSize);
  }

  void parse();
  void parseHeader(Cursor& c, uint64_t& tensorCount, uint64_t& kvCount);
  void parseMetadata(Cursor& c, uint64_t kvCount);
  void parseTensorInfos(Cursor& c, uint64_t tensorCount);
  void placeTensorData(size_t dataStart);
  [[noreturn]] void fail(const std::string& what) const { throw Error(displayName + ": " + what); }
  const Value& require(std::string_view key) const;
};

void File::Impl::parse() {
  Cursor c(data, available, size, displayName);
  uint64_t tensorCount = 0;
  uint64_t kvCount = 0;
  parseHeader(c, tensorCount, kvCount);
  parseMetadata(c, kvCount);
  parseTensorInfos(c, tensorCount);
  // The data section starts at the next multiple of the alignment after the tensor infos.
  const size_t pos = c.pos();
  const size_t pad = (alignment - pos % alignment) % alignment;
  size_t dataStart = pos;
  if (__builtin_add_overflow(pos, pad, &dataStart)) {
    fail("data section start overflows with alignment " + num(alignment));
  }
  placeTensorData(dataStart);
}

void File::Impl::parseHeader(Cursor& c, uint64_t& tensorCount, uint64_t& kvCount) {
  if (size < 4) fail("not a GGUF file (only " + num(size) + " bytes)");
  if (available < 4) throw HeaderIncomplete(displayName + ": no bytes of the header read");
  const uint32_t magic = c.read<uint32_t>("", "magic");
  if (magic != kMagic) {
    fail("not a GGUF file (magic " + hex(magic) + ", expected " + hex(kMagic) + " \"GGUF\")");
  }
  version = c.read<uint32_t>("header: ", "version");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    std::string hint;
    if (swapped == 2 || swapped == 3) hint = "; this looks like a big-endian file";
    fail("GGUF version " + num(version) + " is not supported (only versions 2 and 3" + hint + ")");
  }
  tensorCount = c.read<uint64_t>("header: ", "tensor count");
  kvCount = c.read<uint64_t>("header: ", "metadata count");
  // A kv takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 8 + 4 + 8.
  if (kvCount > c.remaining() / 13) {
    fail("header: metadata count " + num(kvCount) + " cannot fit in the " + num(c.remaining()) +
         " bytes left");
  }
  if (tensorCount > c.remaining() / 32) {
    fail("header: tensor count " + num(tensorCount) + " cannot fit in the " + num(c.remaining()) +
         " bytes left");
  }
}

void File::Impl::parseMetadata(Cursor& c, uint64_t kvCount) {
  ValueParser values(c);
  metadata.reserve(static_cast<size_t>(kvCount));
  for (uint64_t i = 0; i < kvCount; ++i) {
    const std::string where = "metadata entry " + num(i) + ": ";
    std::string key = c.readString(where, "key", kMaxKeyLength);
    const std::string ctx = "key " + key + ": ";
    const uint32_t rawType = c.read<uint32_t>(ctx, "value type");
    if (!validValueType(rawType)) fail(ctx + "unknown value type " + num(rawType));
    Value value = values.parse(static_cast<ValueType>(rawType), ctx, 0);
    if (!keyIndex.emplace(key, metadata.size()).second) {
      fail(ctx + "duplicate key (entries " + num(keyIndex.at(key)) + " and " + num(i) + ")");
    }
    metadata.push_back(KeyValue{std::move(key), std::move(value)});
  }
  auto alignmentIt = keyIndex.find("general.alignment");
  if (alignmentIt != keyIndex.end()) {
    const Value* a = &metadata[alignmentIt->second].value;
    const auto v = a->asUInt();
    if (!v || a->type == ValueType::Bool) {
      fail("key general.alignment: expected an unsigned integer, got " + describeType(*a));
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      fail("key general.alignment: " + num(*v) + " is not a nonzero power of 2");
    }
    if (*v > std::numeric_limits<size_t>::max() / 2) {
      fail("key general.alignment: " + num(*v) + " is too large");
    }
    alignment = static_cast<size_t>(*v);
  }
}

void File::Impl::parseTensorInfos(Cursor& c, uint64_t tensorCount) {
  tensors.reserve(static_cast<size_t>(tensorCount));
  for (uint64_t i = 0; i < tensorCount; ++i) {
    TensorInfo t;
    t.name = c.readString("tensor info " + num(i) + ": ", "name");
    const std::string ctx = "tensor " + t.name + ": ";
    const uint32_t nDims = c.read<uint32_t>(ctx, "n_dims");
    if (nDims == 0 || nDims > kMaxDims) {
      fail(ctx + "n_dims " + num(nDims) + " out of range (1.." + num(kMaxDims) + ")");
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < nDims; ++d) {
      const uint64_t dim = c.read<uint64_t>(ctx, "dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(ctx + "dimension " + num(d) + " is " +
             (dim == 0 ? std::string("0") : std::to_string(static_cast<int64_t>(dim))) +
             " (must be positive)");
      }
      if (mulOverflows(elements, dim, elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(ctx + "element count overflows int64 at dimension " + num(d) + " (" + num(dim) + ")");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint32_t rawType = c.read<uint32_t>(ctx, "type");
    const auto traits = typeTraits(rawType);
    if (!traits) fail(ctx + "unknown tensor type " + num(rawType));
    t.type = static_cast<TensorType>(rawType);
    if (t.dims[0] % traits->blockSize != 0) {
      fail(ctx + "row length " + num(static_cast<uint64_t>(t.dims[0])) +
           " is not a multiple of the " + std::string(traits->name) + " block size " +
           num(static_cast<uint64_t>(traits->blockSize)));
    }
    uint64_t nbytes = 0;
    if (mulOverflows(elements / static_cast<uint64_t>(traits->blockSize), traits->typeSize,
                     nbytes) ||
        nbytes > std::numeric_limits<size_t>::max()) {
      fail(ctx + "byte size of " + num(elements) + " " + std::string(traits->name) +
           " elements overflows");
    }
    t.nbytes = static_cast<size_t>(nbytes);
    t.offset = c.read<uint64_t>(ctx, "offset");
    if (!tensorIndex.emplace(t.name, tensors.size()).second) {
      fail(ctx + "duplicate tensor name (tensor infos " + num(tensorIndex.at(t.name)) + " and " +
           num(i) + ")");
    }
    tensors.push_back(std::move(t));
  }
}

void File::Impl::placeTensorData(size_t dataStart) {
  for (TensorInfo& t : tensors) {
    const std::string ctx = "tensor " + t.name + ": ";
    if (t.offset % alignment != 0) {
      fail(ctx + "data offset " + hex(t.offset) + " is not a multiple of the alignment " +
           num(alignment));
    }
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(uint64_t{dataStart}, t.offset, &begin) ||
        __builtin_add_overflow(begin, uint64_t{t.nbytes}, &end)) {
      fail(ctx + "data offset " + hex(t.offset) + " + size " + num(t.nbytes) + " overflows");
    }
    if (end > size) {
      fail(ctx + "data [" + hex(begin) + ", " + hex(end) + ") beyond end of file (size " +
           num(size) + ")");
    }
    t.data = headerOnly ? nullptr : data + begin;
  }
  // Tensors must not share bytes: a writer never does that, and a consumer writing into one
  // (a shard cache) would corrupt another.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& prev = tensors[order[i - 1]];
    const TensorInfo& cur = tensors[order[i]];
    if (cur.offset < prev.offset + prev.nbytes) {
      fail("tensor " + cur.name + ": data at offset " + hex(cur.offset) + " overlaps tensor " +
           prev.name + " [" + hex(prev.offset) + ", " + hex(prev.offset + prev.nbytes) + ")");
    }
  }
}

const Value& File::Impl::require(std::string_view key) const {
  auto it = keyIndex.find(std::string(key));
  if (it == keyIndex.end()) fail("missing key " + std::string(key));
  return metadata[it->second].value;
}

File::File(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->displayName = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) impl->fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    impl->fail(std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    impl->fail("not a regular file");
  }
  impl->size = static_cast<size_t>(st.st_size);
  if (impl->size == 0) {
    ::close(fd);
    impl->fail("not a GGUF file (empty)");
  }
  void* m = mapAlignedToHugePage(fd, impl->size);
  const int mmapErr = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) impl->fail(std::string("cannot mmap: ") + std::strerror(mmapErr));
  impl->mapping = m;
  impl->mappingSize = impl->size;
  impl->data = static_cast<const uint8_t*>(m);
  impl->available = impl->size;
  impl->parse();
  return File(std::move(impl));
}

File File::fromBuffer(std::span<const uint8_t> bytes, std::string displayName) {
  auto impl = std::make_unique<Impl>();
  impl->displayName = std::move(displayName);
  impl->data = bytes.data();
  impl->size = bytes.size();
  impl->available = bytes.size();
  impl->parse();
  return File(std::move(impl));
}

File File::fromHeader(std::span<const uint8_t> prefix, uint64_t wholeFileSize,
                      std::string displayName) {
  auto impl = std::make_unique<Impl>();
  impl->displayName = std::move(displayName);
  if (wholeFileSize > std::numeric_limits<size_t>::max() / 2 || prefix.size() > wholeFileSize) {
    impl->fail("header of " + num(prefix.size()) + " bytes for a file of " + num(wholeFileSize) +
               " bytes");
  }
  impl->data = prefix.data();
  impl->size = static_cast<size_t>(wholeFileSize);
  impl->available = prefix.size();
  impl->headerOnly = true;
  impl->parse();
  return File(std::move(impl));
}

uint32_t File::version() const { return m_impl->version; }
size_t File::alignment() const { return m_impl->alignment; }
size_t File::fileSize() const { return m_impl->size; }
const std::string& File::displayName() const { return m_impl->displayName; }
const std::vector<KeyValue>& File::metadata() const { return m_impl->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return m_impl->tensors; }

void File::releasePages(const uint8_t* p, size_t bytes) const {
  if (!m_impl->mapping || p == nullptr) return;
  const auto base = reinterpret_cast<uintptr_t>(m_impl->mapping);
  const uintptr_t end = base + m_impl->mappingSize;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Only whole pages inside both the range and the mapping.
  const uintptr_t from = (std::max(reinterpret_cast<uintptr_t>(p), base) + page - 1) / page * page;
  const uintptr_t to = std::min(reinterpret_cast<uintptr_t>(p) + bytes, end) / page * page;
  // A private, read-only file mapping: MADV_DONTNEED drops the pages, and reading them again
  // repopulates them from the file (they were never written, so nothing is lost).
  if (from < to) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

const Value* File::find(std::string_view key) const {
  auto it = m_impl->keyIndex.find(std::string(key));
  return it == m_impl->keyIndex.end() ? nullptr : &m_impl->metadata[it->second].value;
}

const TensorInfo* File::findTensor(std::string_view name) const {
  auto it = m_impl->tensorIndex.find(std::string(name));
  return it == m_impl->tensorIndex.end() ? nullptr : &m_impl->tensors[it->second];
}

std::string File::getString(std::string_view key) const {
  const Value& v = m_impl->require(key);
  if (const std::string* s = v.asString()) return *s;
  m_impl->fail("key " + std::string(key) + ": expected a string, got " + describeType(v));
}

std::string File::getStringOr(std::string_view key, std::string fallback) const {
  return find(key) ? getString(key) : std::move(fallback);
}

int64_t File::getInt(std::string_view key) const {
  const Value& v = m_impl->require(key);
  if (v.type != ValueType::Bool) {
    if (auto i = v.asInt()) return *i;
  }
  m_impl->fail("key " + std::string(key) + ": expected an integer that fits int64, got " +
               describeType(v));
}

int64_t File::getIntOr(std::string_view key, int64_t fallback) const {
  return find(key) ? getInt(key) : fallback;
}

double File::getFloat(std::string_view key) const {
  const Value& v = m_impl->require(key);
  if (v.type != ValueType::Bool) {
    if (auto f = v.asFloat()) return *f;
  }
  m_impl->fail("key " + std::string(key) + ": expected a number, got " + describeType(v));
}

double File::getFloatOr(std::string_view key, double fallback) const {
  return find(key) ? getFloat(key) : fallback;
}

bool File::getBoolOr(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (auto b = v->asBool()) return *b;
  m_impl->fail("key " + std::string(key) + ": expected a bool, got " + describeType(*v));
}

}  // namespace shoal::gguf
