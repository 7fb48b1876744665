#pragma once
// The app's hidden screenshot mode (scripts/screenshots): show one page in a known state, save a
// PNG of the window and quit.
//   chat    after the reply to --send-on-start's message is finished
//   models  after the model has loaded (or failed to)
//   pool    with ScreenshotOptions::poolNodes: a live pool. The nodes (which must trust this
//           app's pool identity, and be trusted by it) are added by address, the plan is
//           previewed and deployed through the page's buttons, a reply is generated on the pool
//           through the chat ("Run on: Pool"), and the page is saved after kPoolLiveMs more of
//           telemetry. Without nodes: 60 s of the fake feed, labelled as demo data.
//   discover  Models → Discover after searching the Hub (HF_ENDPOINT: scripts/screenshots starts
//           tests/hub/fake_hub.py) for ScreenshotOptions::hubSearch, once the first result's
//           models have their fit filled
//   welcome   the first-run page

#include <QString>
#include <QStringList>

namespace shoal::gui {

class ChatWindow;

struct ScreenshotOptions {
  QStringList poolNodes;          // "host:port" of the live pool's nodes
  qint64 poolMaxDeviceBytes = 0;  // cap per device, so that the plan spreads over the nodes
  QString poolPrompt;             // the message sent to the pool once it is deployed
  QString hubSearch = "SmolLM2";  // what the discover page searches for
};

// Arranges for `window` to save `page` to `outFile` and quit the app with 0 (or 1 when the page
// is unknown, the file cannot be written, the pool fails, or nothing happened within the time
// limit).
void scheduleScreenshot(ChatWindow& window, const QString& page, const QString& outFile,
                        const ScreenshotOptions& options = {});

}  // namespace shoal::gui
