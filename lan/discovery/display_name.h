#pragma once
// Names and one-line texts that arrive from the network unauthenticated (a beacon's name and
// summary, the name a peer gives in pairing) end up in logs, terminals, trusted.json and the
// app. sanitizeDisplayText makes such a text safe to print: one line, no terminal control,
// bounded length. Used by discovery (beacon name and summary) and lan/transport's pairing (the
// peer's name): one rule for every place a peer names itself.

#include <cstddef>
#include <string>
#include <string_view>

namespace shoal::lan {

// The most bytes a display name keeps: the beacon's name limit (beacon.h kMaxNameBytes = 128),
// so a sanitized beacon name is never cut further.
inline constexpr size_t kMaxDisplayNameBytes = 128;

// `text` as something safe to print on one line, at most `maxBytes` bytes of valid UTF-8:
//   - bytes that are not valid UTF-8 (overlong forms, surrogates, truncated sequences) become
//     U+FFFD, so a terminal never sees a partial sequence it could misread;
//   - C0 controls (ESC, so no terminal escape sequence survives; NUL; BEL), DEL and C1 controls
//     (U+0080..U+009F: 8-bit CSI) are removed; tab, CR, LF and the Unicode line and paragraph
//     separators (U+2028, U+2029) become a space (no forged second log line);
//   - Unicode bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069) are removed,
//     so a name cannot reorder the text printed after it;
//   - runs of spaces collapse to one, leading and trailing spaces are trimmed;
//   - the result is cut to maxBytes at a character boundary.
// Never throws.
std::string sanitizeDisplayText(std::string_view text, size_t maxBytes = kMaxDisplayNameBytes);

}  // namespace shoal::lan
