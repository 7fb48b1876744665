#pragma once
// The app's hidden screenshot mode (scripts/screenshots): show one page in a known state, save a
// PNG of the window and quit.
//   chat    after the reply to --send-on-start's message is finished
//   models  after the model has loaded (or failed to)
//   pool    with 60 s of the fake pool feed (no live pool feeds the page yet; it says so)

#include <QString>

namespace shoal::gui {

class ChatWindow;

// Arranges for `window` to save `page` to `outFile` and quit the app with 0 (or 1 when the page
// is unknown, the file cannot be written, or nothing happened within the time limit).
void scheduleScreenshot(ChatWindow& window, const QString& page, const QString& outFile);

}  // namespace shoal::gui
