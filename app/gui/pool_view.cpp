#include "app/gui/pool_view.h"

#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QVBoxLayout>
#include <algorithm>

#include "app/gui/device_card.h"
#include "app/gui/model_catalog.h"
#include "app/gui/pipeline_diagram.h"
#include "app/gui/pool_controller.h"
#include "app/gui/pool_setup_panel.h"
#include "app/gui/share_panel.h"

namespace shoal::gui {
namespace {

QString keyOf(const lan::DeviceTelemetry& d) {
  return QString::fromStdString(d.nodeId) + '/' + QString::fromStdString(d.deviceId);
}

}  // namespace

PoolView::PoolView(QWidget* parent) : QWidget(parent) {
  qRegisterMetaType<lan::PoolSnapshot>();
  auto* layout = new QVBoxLayout(this);

  auto* local = new QGroupBox(tr("This machine"));
  auto* localLayout = new QVBoxLayout(local);
  m_local = new QLabel(tr("Looking for devices…"));
  m_local->setObjectName("localDevices");
  m_local->setWordWrap(true);
  m_local->setTextInteractionFlags(Qt::TextSelectableByMouse);
  localLayout->addWidget(m_local);
  layout->addWidget(local);

  m_share = new SharePanel;
  m_share->setObjectName("sharePanel");
  layout->addWidget(m_share);

  auto* pool = new QGroupBox(tr("Pool"));
  auto* poolLayout = new QVBoxLayout(pool);
  m_setup = new PoolSetupPanel;
  m_setup->setObjectName("poolSetup");
  connect(m_setup, &PoolSetupPanel::previewRequested, this,
          [this] { emit planRequested(m_modelPath); });
  m_plan = new QLabel(tr("No pool: this machine runs alone."));
  m_plan->setObjectName("planLabel");
  QFont big = m_plan->font();
  big.setPointSizeF(big.pointSizeF() * 1.15);
  big.setBold(true);
  m_plan->setFont(big);
  m_note = new QLabel;
  m_note->setObjectName("sourceNote");
  m_note->hide();
  m_diagram = new PipelineDiagram;
  m_cardArea = new QWidget;
  m_cardLayout = new QHBoxLayout(m_cardArea);
  m_cardLayout->setAlignment(Qt::AlignLeft);
  auto* scroll = new QScrollArea;
  scroll->setObjectName("cardScroll");
  scroll->setWidgetResizable(true);
  scroll->setWidget(m_cardArea);
  scroll->setFrameShape(QFrame::NoFrame);
  // Cards scroll sideways; their charts shrink to the height there is.
  scroll->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  poolLayout->addWidget(m_setup);
  poolLayout->addWidget(m_plan);
  poolLayout->addWidget(m_note);
  poolLayout->addWidget(m_diagram);
  poolLayout->addWidget(scroll, 1);
  layout->addWidget(pool, 1);
}

QList<DeviceCard*> PoolView::cards() const {
  QList<DeviceCard*> out;
  for (const QString& k : m_order) out.push_back(m_cards.value(k));
  return out;
}

void PoolView::attachController(PoolController* c) {
  constexpr auto q = Qt::QueuedConnection;
  connect(m_setup, &PoolSetupPanel::addNodeRequested, c, &PoolController::addNode, q);
  connect(m_setup, &PoolSetupPanel::pairRequested, c, &PoolController::pair, q);
  connect(this, &PoolView::planRequested, c, &PoolController::previewPlan, q);
  connect(m_setup, &PoolSetupPanel::deployRequested, c, &PoolController::deploy, q);
  connect(c, &PoolController::started, m_setup, &PoolSetupPanel::onStarted, q);
  connect(c, &PoolController::failed, m_setup, &PoolSetupPanel::showError, q);
  connect(c, &PoolController::peersChanged, m_setup, &PoolSetupPanel::setPeers, q);
  connect(c, &PoolController::paired, m_setup, &PoolSetupPanel::onPaired, q);
  connect(m_setup, &PoolSetupPanel::forgetRequested, c, &PoolController::forget, q);
  connect(c, &PoolController::forgotten, m_setup, &PoolSetupPanel::onForgotten, q);
  connect(c, &PoolController::trustedDevicesChanged, m_setup, &PoolSetupPanel::setTrustedDevices,
          q);
  connect(c, &PoolController::nodeAdded, m_setup, &PoolSetupPanel::onNodeAdded, q);
  connect(c, &PoolController::planReady, m_setup, &PoolSetupPanel::showPlan, q);
  connect(c, &PoolController::deployProgress, m_setup, &PoolSetupPanel::showDeployProgress, q);
  connect(c, &PoolController::deployed, m_setup, &PoolSetupPanel::onDeployed, q);
  connect(c, &PoolController::snapshot, this, &PoolView::setSnapshot, q);
  connect(m_share, &SharePanel::pairingCodeRequested, c, &PoolController::showPairingCode, q);
  connect(c, &PoolController::sharing, m_share, &SharePanel::onSharing, q);
  connect(c, &PoolController::pairingCodeReady, m_share, &SharePanel::showPairingCode, q);
  connect(c, &PoolController::failed, m_share, &SharePanel::onFailed, q);
}

QString PoolView::planText() const { return m_plan->text(); }
QString PoolView::localDevicesText() const { return m_local->text(); }

void PoolView::setSourceNote(const QString& note) {
  m_note->setText(note);
  m_note->setVisible(!note.isEmpty());
}

void PoolView::setLocalBackends(const QList<BackendStatus>& backends) {
  QStringList lines;
  for (const BackendStatus& b : backends) {
    if (!b.available) {
      lines << tr("%1: unavailable — %2").arg(b.name, b.reason);
      continue;
    }
    for (const runtime::DeviceInfo& d : b.devices) {
      lines << tr("%1 · %2: %3 — %4 free of %5")
                   .arg(b.name, QString::fromStdString(d.id), QString::fromStdString(d.name),
                        formatBytes(d.memoryFree), formatBytes(d.memoryTotal));
    }
  }
  m_local->setText(lines.join('\n'));
}

void PoolView::setSnapshot(const lan::PoolSnapshot& snapshot) {
  if (snapshot.devices.empty()) {
    m_plan->setText(tr("No pool: this machine runs alone."));
  } else if (snapshot.modelName.empty()) {
    m_plan->setText(tr("%n device(s) pooled, no model deployed", nullptr,
                       static_cast<int>(snapshot.devices.size())));
  } else {
    m_plan->setText(tr("%1 over %2 device(s): predicted %3 tokens/s")
                        .arg(QString::fromStdString(snapshot.modelName))
                        .arg(snapshot.devices.size())
                        .arg(snapshot.predictedTokensPerS, 0, 'f', 1));
  }
  m_diagram->setSnapshot(snapshot);

  // Stage order (devices without layers last), matching the diagram's colours.
  std::vector<const lan::DeviceTelemetry*> order;
  for (const lan::DeviceTelemetry& d : snapshot.devices) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const int fa = a->firstLayer >= 0 ? a->firstLayer : INT32_MAX;
    const int fb = b->firstLayer >= 0 ? b->firstLayer : INT32_MAX;
    return fa < fb;
  });
  QStringList keys;
  for (const auto* d : order) keys << keyOf(*d);
  for (auto it = m_cards.begin(); it != m_cards.end();) {
    if (!keys.contains(it.key())) {
      delete it.value();  // the device left the pool
      it = m_cards.erase(it);
    } else {
      ++it;
    }
  }
  int stage = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const lan::DeviceTelemetry& d = *order[i];
    DeviceCard*& card = m_cards[keys[static_cast<int>(i)]];
    const bool hasLayers = d.firstLayer >= 0 && d.lastLayer > d.firstLayer;
    const QColor color = hasLayers ? PipelineDiagram::deviceColor(stage) : QColor(Qt::gray);
    if (!card) {
      card = new DeviceCard(color);
      card->setObjectName("deviceCard");
    }
    card->setColor(color);  // a deployment can give a listed device layers
    if (hasLayers) ++stage;
    m_cardLayout->removeWidget(card);
    m_cardLayout->insertWidget(static_cast<int>(i), card);
    card->addSample(d, snapshot.unixMs);
  }
  m_order = keys;
}

}  // namespace shoal::gui
