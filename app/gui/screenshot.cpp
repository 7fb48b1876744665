#include "app/gui/screenshot.h"

#include <QApplication>
#include <QPixmap>
#include <QTimer>
#include <cstdio>

#include "app/gui/chat_window.h"
#include "app/gui/fake_pool_feed.h"
#include "app/gui/model_manager.h"
#include "app/gui/pool_view.h"

namespace shoal::gui {
namespace {

constexpr int kGiveUpMs = 600000;  // loading plus a CPU reply on a slow machine
constexpr int kSettleMs = 400;     // let layouts and the transcript's scroll settle
constexpr int kPoolTicks = 121;    // 60 s of the fake feed at two snapshots a second
constexpr qint64 kPoolStepMs = 500;

void saveAndQuit(ChatWindow& window, const QString& page, const QString& outFile) {
  window.showPage(page);
  QTimer::singleShot(kSettleMs, &window, [&window, outFile] {
    const bool ok = window.grab().save(outFile, "PNG");
    std::fprintf(stderr, "shoal: screenshot %s %s\n", qPrintable(outFile),
                 ok ? "saved" : "could not be written");
    QApplication::exit(ok ? 0 : 1);
  });
}

}  // namespace

void scheduleScreenshot(ChatWindow& window, const QString& page, const QString& outFile) {
  QTimer::singleShot(kGiveUpMs, &window, [] {
    std::fprintf(stderr, "shoal: screenshot timed out\n");
    QApplication::exit(1);
  });
  if (page == "chat") {
    QObject::connect(&window, &ChatWindow::replyDone, &window,
                     [&window, page, outFile] { saveAndQuit(window, page, outFile); });
  } else if (page == "models") {
    ChatEngine* e = window.engine();
    const auto shoot = [&window, page, outFile] {
      ModelManager* m = window.modelManager();
      if (!m->isScanning()) {
        saveAndQuit(window, page, outFile);
        return;
      }
      QObject::connect(m, &ModelManager::refreshed, &window,
                       [&window, page, outFile] { saveAndQuit(window, page, outFile); });
    };
    QObject::connect(e, &ChatEngine::modelLoaded, &window, shoot);
    QObject::connect(e, &ChatEngine::loadFailed, &window, shoot);
  } else if (page == "pool") {
    PoolView* pool = window.poolView();
    pool->setSourceNote(
        QObject::tr("Demo data: a simulated three-machine pool (no live pool "
                    "is connected)."));
    const qint64 start = 1'700'000'000'000;
    for (int tick = 0; tick < kPoolTicks; ++tick) {
      pool->setSnapshot(FakePoolFeed::snapshotAt(tick, start + tick * kPoolStepMs));
    }
    saveAndQuit(window, page, outFile);
  } else {
    std::fprintf(stderr, "shoal: unknown screenshot page '%s' (chat, models, pool)\n",
                 qPrintable(page));
    QTimer::singleShot(0, [] { QApplication::exit(1); });
  }
}

}  // namespace shoal::gui
