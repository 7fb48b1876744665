#include "app/gui/share_panel.h"

#include <QClipboard>
#include <QDateTime>
#include <QFontDatabase>
#include <QGridLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

namespace shoal::gui {
namespace {

constexpr int kTickMs = 1000;
constexpr double kCodeScale = 2.2;  // the code is read from across a desk

QLabel* selectable(const QString& text, const char* objectName) {
  auto* l = new QLabel(text);
  l->setObjectName(objectName);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return l;  // unwrapped: an ID or a code broken over lines is easy to mistype
}

}  // namespace

SharePanel::SharePanel(QWidget* parent)
    : QGroupBox(tr("Let other computers use this one"), parent) {
  auto* layout = new QVBoxLayout(this);
  m_intro = new QLabel(
      tr("Not available: this computer does not share its devices with the pool (the app does "
         "when it starts the pool)."));
  m_intro->setObjectName("shareIntro");
  m_intro->setWordWrap(true);
  layout->addWidget(m_intro);

  // Hidden until this computer's node is up: nothing to show before, and the page stays compact.
  m_details = new QWidget;
  m_details->setObjectName("shareDetails");
  auto* detailsLayout = new QVBoxLayout(m_details);
  detailsLayout->setContentsMargins(0, 0, 0, 0);
  auto* grid = new QGridLayout;
  const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  grid->addWidget(new QLabel(tr("Device ID")), 0, 0);
  m_deviceId = selectable(QString(), "thisDeviceId");
  m_deviceId->setFont(mono);
  grid->addWidget(m_deviceId, 0, 1);
  m_copy = new QPushButton(tr("Copy"));
  m_copy->setObjectName("copyDeviceIdButton");
  m_copy->setToolTip(tr("Copy the device ID, to compare it with what the other computer shows"));
  grid->addWidget(m_copy, 0, 2);
  grid->addWidget(new QLabel(tr("Address")), 1, 0);
  m_addresses = selectable(QString(), "thisAddresses");
  m_addresses->setFont(mono);
  grid->addWidget(m_addresses, 1, 1, 1, 2);
  grid->setColumnStretch(3, 1);  // the Copy button stays next to the ID
  detailsLayout->addLayout(grid);

  auto* codeRow = new QHBoxLayout;
  m_showCode = new QPushButton(tr("Show pairing code"));
  m_showCode->setObjectName("showPairingCodeButton");
  m_showCode->setEnabled(false);
  m_newCode = new QPushButton(tr("New code"));
  m_newCode->setObjectName("newPairingCodeButton");
  m_newCode->setToolTip(tr("Replace the code: the one shown now stops working"));
  m_newCode->hide();
  m_code = selectable(QString(), "pairingCode");
  QFont big = mono;
  big.setPointSizeF(std::max(big.pointSizeF(), 9.0) * kCodeScale);
  big.setBold(true);
  m_code->setFont(big);
  m_expiry = new QLabel;
  m_expiry->setObjectName("pairingCodeExpiry");
  codeRow->addWidget(m_showCode);
  codeRow->addWidget(m_code);
  codeRow->addWidget(m_newCode);
  codeRow->addWidget(m_expiry, 1);
  detailsLayout->addLayout(codeRow);
  m_details->hide();
  layout->addWidget(m_details);

  m_tick = new QTimer(this);
  m_tick->setInterval(kTickMs);
  connect(m_tick, &QTimer::timeout, this, &SharePanel::updateTimeLeft);
  connect(m_showCode, &QPushButton::clicked, this, &SharePanel::requestCode);
  connect(m_newCode, &QPushButton::clicked, this, &SharePanel::requestCode);
  connect(m_copy, &QPushButton::clicked, this, [this] {
    if (QClipboard* c = QGuiApplication::clipboard()) c->setText(m_deviceId->text());
  });
}

QString SharePanel::deviceIdText() const { return m_shared ? m_deviceId->text() : QString(); }
QString SharePanel::addressText() const { return m_shared ? m_addresses->text() : QString(); }
QString SharePanel::codeText() const { return m_code->text(); }
QString SharePanel::expiryText() const { return m_expiry->text(); }

void SharePanel::onSharing(const QString& nodeDeviceId, int port, const QStringList& addresses) {
  // A (re)started node: a code shown for an earlier one no longer pairs.
  m_tick->stop();
  m_code->clear();
  m_expiry->clear();
  m_asking = false;
  m_newCode->hide();
  m_showCode->show();
  m_shared = true;
  m_deviceId->setText(nodeDeviceId);
  m_addresses->setText(addresses.isEmpty() ? tr("port %1").arg(port) : addresses.join(", "));
  m_intro->setText(
      tr("On the other computer, pair with this address and code: its Shoal app's pool page "
         "(Pair…), or <code>shoal-cli pool pair ADDRESS CODE</code>. It then pools this "
         "computer's devices; check that it shows this device ID."));
  m_intro->setTextFormat(Qt::RichText);
  m_showCode->setEnabled(true);
  m_details->show();
}

void SharePanel::requestCode() {
  m_showCode->setEnabled(false);
  m_newCode->setEnabled(false);
  m_expiry->setText(tr("Asking for a code…"));
  m_asking = true;
  emit pairingCodeRequested(kCodeValidSeconds);
}

void SharePanel::onFailed(const QString& text) {
  if (!m_asking) return;
  m_asking = false;
  m_expiry->setText(tr("⚠ %1").arg(text));
  m_showCode->setEnabled(m_shared);
  m_newCode->setEnabled(m_shared);
}

void SharePanel::showPairingCode(const QString& code, qint64 expiresAtMs) {
  m_asking = false;
  m_expiresAtMs = expiresAtMs;
  m_code->setText(code);
  m_showCode->hide();
  m_newCode->show();
  m_newCode->setEnabled(true);
  updateTimeLeft();
  m_tick->start();
}

void SharePanel::updateTimeLeft() {
  const qint64 leftMs = m_expiresAtMs - QDateTime::currentMSecsSinceEpoch();
  if (leftMs <= 0) {
    m_tick->stop();
    m_code->clear();
    m_expiry->setText(tr("The code expired."));
    m_newCode->hide();
    m_showCode->show();
    m_showCode->setEnabled(m_shared);
    return;
  }
  const qint64 s = (leftMs + 999) / 1000;
  m_expiry->setText(tr("valid for %1:%2 more").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0')));
}

}  // namespace shoal::gui
