#include "app/gui/screenshot.h"

#include <QApplication>
#include <QComboBox>
#include <QLineEdit>
#include <QPixmap>
#include <QPushButton>
#include <QTimer>
#include <cstdio>
#include <memory>

#include "app/gui/chat_window.h"
#include "app/gui/fake_pool_feed.h"
#include "app/gui/hub_search_panel.h"
#include "app/gui/model_manager.h"
#include "app/gui/models_page.h"
#include "app/gui/pool_controller.h"
#include "app/gui/pool_setup_panel.h"
#include "app/gui/pool_view.h"

namespace shoal::gui {
namespace {

constexpr int kGiveUpMs = 600000;  // loading plus a CPU reply on a slow machine
constexpr int kSettleMs = 400;     // let layouts and the transcript's scroll settle
constexpr int kPoolTicks = 121;    // 60 s of the fake feed at two snapshots a second
constexpr qint64 kPoolStepMs = 500;
constexpr int kPoolLiveMs = 8000;  // telemetry after the pool's reply, so the charts show it

void saveAndQuit(ChatWindow& window, const QString& page, const QString& outFile) {
  window.showPage(page);
  QTimer::singleShot(kSettleMs, &window, [&window, outFile] {
    const bool ok = window.grab().save(outFile, "PNG");
    std::fprintf(stderr, "shoal: screenshot %s %s\n", qPrintable(outFile),
                 ok ? "saved" : "could not be written");
    QApplication::exit(ok ? 0 : 1);
  });
}

void failAndQuit(const QString& why) {
  std::fprintf(stderr, "shoal: screenshot: %s\n", qPrintable(why));
  QApplication::exit(1);
}

// The live pool: add the nodes, preview, deploy, chat on the pool, then shoot.
void shootLivePool(ChatWindow& window, const QString& outFile, const ScreenshotOptions& o) {
  PoolController* c = window.poolController();
  PoolSetupPanel* setup = window.poolView()->setupPanel();
  QObject::connect(c, &PoolController::failed, &window, &failAndQuit);
  QObject::connect(c, &PoolController::started, &window, [c, o] {
    for (const QString& address : o.poolNodes) {
      QMetaObject::invokeMethod(
          c, [c, address] { c->addNode(address); }, Qt::QueuedConnection);
    }
  });
  auto added = std::make_shared<int>(0);
  QObject::connect(c, &PoolController::nodeAdded, &window, [setup, added, o] {
    if (++*added == o.poolNodes.size()) setup->previewButton()->click();
  });
  // Queued after the panel's own handler of the same signal, which enables Deploy.
  QObject::connect(c, &PoolController::planReady, &window, [setup](const PlanPreview& p) {
    if (!p.feasible) {
      failAndQuit("no plan: " + p.reason);
      return;
    }
    std::fprintf(stderr, "shoal: pool plan: %lld stage(s), predicted %.1f tokens/s\n",
                 static_cast<long long>(p.stages.size()), p.tokensPerS);
    setup->deployButton()->click();
  });
  QObject::connect(c, &PoolController::deployed, &window, [&window, o] {
    window.runOnBox()->setCurrentIndex(1);  // Pool
    window.sendWhenLoaded(o.poolPrompt);
  });
  QObject::connect(
      &window, &ChatWindow::replyDone, &window, [&window, outFile](qint64, const QString& finish) {
        std::fprintf(stderr, "shoal: pool reply finished (%s)\n",
                     qPrintable(finish.isEmpty() ? "failed" : finish));
        window.showPage("pool");
        QTimer::singleShot(kPoolLiveMs, &window,
                           [&window, outFile] { saveAndQuit(window, "pool", outFile); });
      });
  // Last: the controller's thread may answer start() at once, and every handler must be there.
  // Before showing the page starts it plainly; the three nodes only (not this computer), so the
  // picture is the same on every machine.
  window.startPool(o.poolMaxDeviceBytes, false, false);
  window.showPage("pool");
}

// Search, pick the first repository, wait for its models' fit, then shoot.
void shootDiscover(ChatWindow& window, const QString& outFile, const ScreenshotOptions& o) {
  window.showPage("discover");
  HubSearchPanel* panel = window.modelsPage()->discover();
  QObject::connect(panel, &HubSearchPanel::searchShown, &window, [panel] {
    if (panel->repos().empty()) {
      failAndQuit("the Hub search found nothing");
      return;
    }
    panel->selectRepo(0);
  });
  QObject::connect(panel, &HubSearchPanel::fitsShown, &window,
                   [&window, outFile] { saveAndQuit(window, "discover", outFile); });
  QObject::connect(panel, &HubSearchPanel::statusChanged, &window, [](const QString& text) {
    std::fprintf(stderr, "shoal: discover: %s\n", qPrintable(text));
  });
  panel->findChild<QLineEdit*>("hubSearchBox")->setText(o.hubSearch);
  panel->search();
}

}  // namespace

void scheduleScreenshot(ChatWindow& window, const QString& page, const QString& outFile,
                        const ScreenshotOptions& options) {
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
  } else if (page == "discover") {
    shootDiscover(window, outFile, options);
  } else if (page == "welcome") {
    saveAndQuit(window, page, outFile);
  } else if (page == "pool" && !options.poolNodes.isEmpty()) {
    shootLivePool(window, outFile, options);
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
    std::fprintf(stderr,
                 "shoal: unknown screenshot page '%s' (chat, models, discover, "
                 "welcome, pool)\n",
                 qPrintable(page));
    QTimer::singleShot(0, [] { QApplication::exit(1); });
  }
}

}  // namespace shoal::gui
