#include "lan/discovery/rate_limiter.h"

#include <algorithm>

namespace shoal::lan {

void SourceRateLimiter::forgetIdle(DiscoveryClock::time_point now) {
  std::erase_if(m_buckets,
                [&](const auto& entry) { return now - entry.second.last >= kSourceIdleForget; });
}

bool SourceRateLimiter::allow(const std::string& source, DiscoveryClock::time_point now) {
  auto it = m_buckets.find(source);
  if (it == m_buckets.end()) {
    // Sweeping is O(sources), so only when the map is full: at most once per new source beyond
    // the cap, and a flood of new sources at the cap pays it per datagram (1024 entries: a few
    // microseconds).
    if (m_buckets.size() >= m_maxSources) forgetIdle(now);
    if (m_buckets.size() >= m_maxSources) return false;
    it = m_buckets.emplace(source, Bucket{m_burst, now}).first;
  }
  Bucket& b = it->second;
  const double elapsed = std::chrono::duration<double>(now - b.last).count();
  if (elapsed > 0) b.tokens = std::min(m_burst, b.tokens + elapsed * m_perSecond);
  b.last = std::max(b.last, now);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace shoal::lan
