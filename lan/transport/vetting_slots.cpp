#include "lan/transport/vetting_slots.h"

#include <algorithm>

namespace shoal::lan {

namespace {

// `address` with an IPv4-mapped IPv6 address turned into its IPv4 address.
asio::ip::address unmapped(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  return address;
}

}  // namespace

std::string sourceKey(const asio::ip::address& address) {
  return unmapped(address).to_string();  // a link-local one with its scope: "fe80::1%eth0"
}

std::string prefixKey(const asio::ip::address& address) {
  const asio::ip::address plain = unmapped(address);
  if (plain.is_v4() || plain.to_v6().is_link_local()) return "";
  asio::ip::address_v6::bytes_type bytes = plain.to_v6().to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), uint8_t{0});
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

std::optional<VettingSlots::Slot> VettingSlots::admit(const std::string& source,
                                                      const std::string& prefix) {
  if (m_total >= kMaxVetting) return std::nullopt;
  if (vetting(source) >= kMaxVettingPerSource) return std::nullopt;
  const bool known = isKnown(source);
  if (!known && m_unknown >= kMaxVetting - kReservedForKnownSources) return std::nullopt;
  // Only unknown sources count against their /64 (vetting_slots.h).
  const std::string countedPrefix = known ? std::string() : prefix;
  if (!countedPrefix.empty() && vettingInPrefix(countedPrefix) >= kMaxVettingPerPrefix)
    return std::nullopt;
  ++m_bySource[source];
  if (!countedPrefix.empty()) ++m_byPrefix[countedPrefix];
  ++m_total;
  if (!known) ++m_unknown;
  return Slot{source, countedPrefix, known};
}

void VettingSlots::release(const Slot& slot) {
  const auto it = m_bySource.find(slot.source);
  if (it == m_bySource.end()) return;  // not ours: nothing to give back
  if (--it->second == 0) m_bySource.erase(it);
  if (!slot.prefix.empty()) {
    const auto p = m_byPrefix.find(slot.prefix);
    if (p != m_byPrefix.end() && --p->second == 0) m_byPrefix.erase(p);
  }
  --m_total;
  if (!slot.known) --m_unknown;
}

void VettingSlots::rememberTrusted(const std::string& source) {
  if (!m_known.contains(source) && m_known.size() >= kMaxKnownSources) {
    m_known.erase(
        std::min_element(m_known.begin(), m_known.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; }));
  }
  m_known[source] = ++m_clock;
}

bool VettingSlots::isKnown(const std::string& source) const { return m_known.contains(source); }

size_t VettingSlots::vetting(const std::string& source) const {
  const auto it = m_bySource.find(source);
  return it == m_bySource.end() ? 0 : it->second;
}

size_t VettingSlots::vettingInPrefix(const std::string& prefix) const {
  const auto it = m_byPrefix.find(prefix);
  return it == m_byPrefix.end() ? 0 : it->second;
}

}  // namespace shoal::lan
