#include "lan/transport/vetting_slots.h"

#include <algorithm>

namespace shoal::lan {

std::string sourceKey(const asio::ip::address& address) {
  if (address.is_v4()) return address.to_string();
  const asio::ip::address_v6 v6 = address.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string();
  if (v6.is_link_local()) return v6.to_string();  // with its scope: "fe80::1%eth0"
  asio::ip::address_v6::bytes_type bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), uint8_t{0});
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

std::optional<VettingSlots::Slot> VettingSlots::admit(const std::string& source) {
  if (m_total >= kMaxVetting) return std::nullopt;
  if (vetting(source) >= kMaxVettingPerSource) return std::nullopt;
  const bool known = isKnown(source);
  if (!known && m_unknown >= kMaxVetting - kReservedForKnownSources) return std::nullopt;
  ++m_bySource[source];
  ++m_total;
  if (!known) ++m_unknown;
  return Slot{source, known};
}

void VettingSlots::release(const Slot& slot) {
  const auto it = m_bySource.find(slot.source);
  if (it == m_bySource.end()) return;  // not ours: nothing to give back
  if (--it->second == 0) m_bySource.erase(it);
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

}  // namespace shoal::lan
