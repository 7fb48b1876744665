// shoal: the desktop app. Chat with a local GGUF model; -m picks the model (default: the
// default model, see model_path.h). Conversations are kept in the app data directory
// ($SHOAL_DATA_DIR overrides it).
//
// Hidden options for tests and scripts/screenshots:
//   --send-on-start TEXT   once the model is loaded, send TEXT in a new conversation; prints
//                          "shoal: sent" and, at the reply's first token, "shoal: streaming" on
//                          stdout so a test knows when the reply is being generated.
//   --screenshot-page P --screenshot-out FILE [--window-size WxH]
//                          save a PNG of page P and quit (screenshot.h; scripts/screenshots).
//   --pool-nodes A,B,...  [--pool-max-device-mb N] [--pool-prompt TEXT]
//                          with --screenshot-page pool: the live pool to show (screenshot.h).
//   --hub-search TEXT      with --screenshot-page discover: what to search the Hub for.
//   --print-pool-device-id print the app's pool device ID (the nodes' --trust) and quit.

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <cstdio>
#include <exception>

#include "app/gui/chat_store.h"
#include "app/gui/chat_window.h"
#include "app/gui/model_path.h"
#include "app/gui/pool_controller.h"
#include "app/gui/screenshot.h"
#include "lan/transport/identity.h"

namespace {

void say(const char* line) {
  std::fputs(line, stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the reader may kill us any moment after this line
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("shoal");
  QApplication::setOrganizationName("shoal");
  QApplication::setApplicationDisplayName("Shoal");
  QApplication::setDesktopFileName("shoal");
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/shoal.svg")));

  QCommandLineParser parser;
  parser.setApplicationDescription("Chat with local LLMs and pool LAN GPUs.");
  parser.addHelpOption();
  QCommandLineOption model({"m", "model"}, "GGUF model file (default: the default model).",
                           "MODEL");
  parser.addOption(model);
  QCommandLineOption sendOnStart("send-on-start", "Send TEXT once the model is loaded.", "TEXT");
  sendOnStart.setFlags(QCommandLineOption::HiddenFromHelp);
  parser.addOption(sendOnStart);
  QCommandLineOption shotPage("screenshot-page",
                              "Page to save: chat, models, discover, welcome, pool.", "PAGE");
  QCommandLineOption shotOut("screenshot-out", "PNG file for --screenshot-page.", "FILE");
  QCommandLineOption windowSize("window-size", "Window size, e.g. 1280x800.", "WxH");
  QCommandLineOption poolNodes("pool-nodes", "Live pool nodes for the pool screenshot.", "LIST");
  QCommandLineOption poolCap("pool-max-device-mb", "Pool memory cap per device.", "MB");
  QCommandLineOption poolPrompt("pool-prompt", "Message sent to the pool.", "TEXT");
  QCommandLineOption hubSearch("hub-search", "Hub search for the discover screenshot.", "TEXT");
  QCommandLineOption printPoolId("print-pool-device-id", "Print the pool device ID and quit.");
  for (QCommandLineOption* o : {&shotPage, &shotOut, &windowSize, &poolNodes, &poolCap, &poolPrompt,
                                &hubSearch, &printPoolId}) {
    o->setFlags(QCommandLineOption::HiddenFromHelp);
    parser.addOption(*o);
  }
  parser.process(app);

  if (parser.isSet(printPoolId)) {
    const QString dir =
        shoal::gui::PoolController::configDirOf(shoal::gui::ChatStore::defaultDirectory());
    try {
      std::printf("%s\n", shoal::lan::loadOrCreateIdentity(dir.toStdString()).deviceId.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal: %s\n", e.what());
      return 1;
    }
  }

  const QString path = parser.isSet(model) ? parser.value(model) : shoal::gui::defaultModelPath();
  shoal::gui::ChatWindow window(path, shoal::gui::ChatStore::defaultDirectory());
  if (parser.isSet(windowSize)) {
    const QStringList wh = parser.value(windowSize).split('x');
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  }
  window.show();
  if (parser.isSet(shotPage) && parser.isSet(shotOut)) {
    shoal::gui::ScreenshotOptions so;
    so.poolNodes = parser.value(poolNodes).split(',', Qt::SkipEmptyParts);
    so.poolMaxDeviceBytes = static_cast<qint64>(parser.value(poolCap).toDouble() * 1e6);
    so.poolPrompt = parser.isSet(poolPrompt) ? parser.value(poolPrompt)
                                             : QStringLiteral("Tell a short story about a fish.");
    if (parser.isSet(hubSearch)) so.hubSearch = parser.value(hubSearch);
    shoal::gui::scheduleScreenshot(window, parser.value(shotPage), parser.value(shotOut), so);
  }

  if (parser.isSet(sendOnStart)) {
    using shoal::gui::ChatEngine;
    bool streaming = false;
    QObject::connect(window.engine(), &ChatEngine::loadFailed, &window, [](const QString& reason) {
      std::fprintf(stdout, "shoal: load failed: %s\n", qPrintable(reason));
      std::fflush(stdout);
    });
    QObject::connect(window.engine(), &ChatEngine::modelLoaded, &window,
                     [] { say("shoal: sent"); });
    QObject::connect(window.engine(), &ChatEngine::tokenStreamed, &window, [streaming]() mutable {
      if (!std::exchange(streaming, true)) say("shoal: streaming");
    });
    window.sendWhenLoaded(parser.value(sendOnStart));
  }
  return QApplication::exec();
}
