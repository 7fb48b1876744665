#pragma once
// A zero-filled array whose memory becomes resident only where it is written (or read through
// a page that was written). The stage sizes its activations for maxBatch tokens (512) and its KV
// cache for the whole context up front, so that forward() never allocates; with std::vector
// every page of those was written by the zero fill at construction, which made peak RSS grow
// with maxBatch x nFf and the context length even when a chat uses a few tokens of each. Here
// large arrays are anonymous mappings the kernel fills with zeros on first touch; a page only
// ever read maps the shared zero page, which does not count as resident either.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define SHOAL_ZEROED_BUFFER_MMAP 1
#endif

namespace shoal::cpu {

template <class T>
class ZeroedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "zero bytes must be a valid T");

 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(size_t count) { reset(count); }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  ZeroedBuffer(ZeroedBuffer&& o) noexcept
      : m_data(std::exchange(o.m_data, nullptr)),
        m_size(std::exchange(o.m_size, 0)),
        m_mapped(o.m_mapped) {}
  ZeroedBuffer& operator=(ZeroedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      m_data = std::exchange(o.m_data, nullptr);
      m_size = std::exchange(o.m_size, 0);
      m_mapped = o.m_mapped;
    }
    return *this;
  }
  ~ZeroedBuffer() { release(); }

  // Replaces the contents with `count` zeros (the old contents are dropped, not copied).
  // Throws std::bad_alloc when the memory cannot be reserved.
  void reset(size_t count) {
    release();
    if (count == 0) return;
    const size_t bytes = count * sizeof(T);
#ifdef SHOAL_ZEROED_BUFFER_MMAP
    // Below a few pages a mapping costs more (a syscall, a whole page) than it can save.
    if (bytes >= kMapThreshold) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      m_data = static_cast<T*>(p);
      m_size = count;
      m_mapped = true;
      return;
    }
#endif
    // calloc: zeros; large blocks from most allocators are fresh, lazily committed pages too.
    m_data = static_cast<T*>(std::calloc(count, sizeof(T)));
    if (!m_data) throw std::bad_alloc();
    m_size = count;
    m_mapped = false;
  }

  // Grows to at least `count` elements (zeros; old contents dropped). Never shrinks.
  void reserve(size_t count) {
    if (count > m_size) reset(count);
  }

  size_t size() const { return m_size; }
  T* data() { return m_data; }
  const T* data() const { return m_data; }
  T& operator[](size_t i) { return m_data[i]; }
  const T& operator[](size_t i) const { return m_data[i]; }
  T* begin() { return m_data; }
  T* end() { return m_data + m_size; }
  const T* begin() const { return m_data; }
  const T* end() const { return m_data + m_size; }

 private:
  static constexpr size_t kMapThreshold = 64 * 1024;

  void release() {
    if (!m_data) return;
#ifdef SHOAL_ZEROED_BUFFER_MMAP
    if (m_mapped) {
      munmap(m_data, m_size * sizeof(T));
    } else {
      std::free(m_data);
    }
#else
    std::free(m_data);
#endif
    m_data = nullptr;
    m_size = 0;
  }

  T* m_data = nullptr;
  size_t m_size = 0;
  bool m_mapped = false;
};

}  // namespace shoal::cpu
