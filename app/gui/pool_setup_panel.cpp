#include "app/gui/pool_setup_panel.h"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "app/gui/model_catalog.h"

namespace shoal::gui {
namespace {

constexpr int kProgressSteps = 1000;
constexpr int kNodeListRows = 4;  // rows the node list shows before it scrolls

QString stageLine(const PlanStagePreview& s) {
  QString extra;
  if (s.hasEmbedding) extra += QObject::tr(" + embedding");
  if (s.hasHead) extra += QObject::tr(" + head");
  return QObject::tr("%1 · %2: layers %3–%4%5")
      .arg(s.nodeName.isEmpty() ? s.nodeId.left(7) : s.nodeName, s.deviceId)
      .arg(s.firstLayer)
      .arg(s.lastLayer - 1)
      .arg(extra);
}

}  // namespace

PoolSetupPanel::PoolSetupPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);

  // Left: nodes.
  auto* nodesBox = new QVBoxLayout;
  m_nodes = new QTreeWidget;
  m_nodes->setObjectName("nodeList");
  m_nodes->setHeaderLabels({tr("Node"), tr("Address"), tr("State"), QString(), QString()});
  m_nodes->setRootIsDecorated(false);
  m_nodes->header()->setStretchLastSection(false);
  m_nodes->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  m_nodes->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  m_nodes->header()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  m_nodes->header()->setSectionResizeMode(3, QHeaderView::ResizeToContents);
  m_nodes->header()->setSectionResizeMode(4, QHeaderView::ResizeToContents);
  m_nodes->setMaximumHeight(m_nodes->fontMetrics().height() * (kNodeListRows + 3));
  nodesBox->addWidget(m_nodes);
  auto* addRow = new QHBoxLayout;
  m_address = new QLineEdit;
  m_address->setObjectName("nodeAddress");
  m_address->setPlaceholderText(tr("Add node by address, e.g. 192.168.1.20:47475"));
  m_add = new QPushButton(tr("Add"));
  m_add->setObjectName("addNodeButton");
  m_pairAddress = new QPushButton(tr("Pair…"));
  m_pairAddress->setObjectName("pairAddressButton");
  addRow->addWidget(m_address, 1);
  addRow->addWidget(m_add);
  addRow->addWidget(m_pairAddress);
  nodesBox->addLayout(addRow);
  layout->addLayout(nodesBox, 3);

  // Right: plan and deployment.
  auto* planBox = new QVBoxLayout;
  m_plan = new QLabel(tr("Add nodes, then preview the plan."));
  m_plan->setObjectName("planPreview");
  m_plan->setWordWrap(true);
  m_plan->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  m_plan->setTextInteractionFlags(Qt::TextSelectableByMouse);
  planBox->addWidget(m_plan, 1);
  auto* buttons = new QHBoxLayout;
  m_preview = new QPushButton(tr("Preview plan"));
  m_preview->setObjectName("previewButton");
  m_deploy = new QPushButton(tr("Deploy"));
  m_deploy->setObjectName("deployButton");
  m_deploy->setEnabled(false);
  m_progress = new QProgressBar;
  m_progress->setObjectName("deployProgress");
  m_progress->setRange(0, kProgressSteps);
  m_progress->setValue(0);
  m_progress->setFormat(tr("weights %p%"));
  buttons->addWidget(m_preview);
  buttons->addWidget(m_deploy);
  buttons->addWidget(m_progress, 1);
  planBox->addLayout(buttons);
  m_status = new QLabel;
  m_status->setObjectName("poolStatus");
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  planBox->addWidget(m_status);
  layout->addLayout(planBox, 4);

  connect(m_add, &QPushButton::clicked, this, [this] {
    const QString a = m_address->text().trimmed();
    if (a.isEmpty()) return;
    setStatus(tr("Connecting to %1…").arg(a));
    emit addNodeRequested(a);
  });
  connect(m_address, &QLineEdit::returnPressed, m_add, &QPushButton::click);
  connect(m_pairAddress, &QPushButton::clicked, this, [this] {
    const QString a = m_address->text().trimmed();
    if (!a.isEmpty()) openPairDialog(a, a);
  });
  connect(m_preview, &QPushButton::clicked, this, [this] {
    m_deploy->setEnabled(false);
    setStatus(tr("Measuring the links and planning…"));
    emit previewRequested();
  });
  connect(m_deploy, &QPushButton::clicked, this, [this] {
    m_deploy->setEnabled(false);
    m_preview->setEnabled(false);
    m_busy = true;
    m_progress->setValue(0);
    setStatus(tr("Deploying…"));
    emit deployRequested();
  });
}

QString PoolSetupPanel::planText() const { return m_plan->text(); }
QString PoolSetupPanel::statusText() const { return m_status->text(); }

void PoolSetupPanel::setStatus(const QString& text) { m_status->setText(text); }

void PoolSetupPanel::openPairDialog(const QString& address, const QString& name) {
  delete m_pairDialog;
  m_pairDialog = new QInputDialog(this);
  m_pairDialog->setObjectName("pairDialog");
  m_pairDialog->setWindowTitle(tr("Pair with %1").arg(name));
  m_pairDialog->setLabelText(
      tr("Type the pairing code %1 shows (shoal-node --pair prints it):").arg(name));
  m_pairDialog->setTextValue(QString());
  connect(m_pairDialog, &QInputDialog::textValueSelected, this, [this, address](const QString& c) {
    if (c.trimmed().isEmpty()) return;
    setStatus(tr("Pairing with %1…").arg(address));
    emit pairRequested(address, c.trimmed());
  });
  m_pairDialog->open();  // window-modal, never blocks the event loop
}

void PoolSetupPanel::setPeers(const QList<DiscoveredNode>& peers) {
  m_peers = peers;
  refreshNodeRows();
}

void PoolSetupPanel::onStarted(const QString& deviceId, int /*listenPort*/) {
  setStatus(tr("This app's pool ID: %1").arg(deviceId));
}

void PoolSetupPanel::onPaired(const QString& deviceId, const QString& address) {
  for (DiscoveredNode& p : m_peers) {
    if (p.deviceId == deviceId) p.trusted = true;
  }
  refreshNodeRows();
  setStatus(tr("Paired with %1; adding it…").arg(address));
}

void PoolSetupPanel::setTrustedDevices(const QList<DiscoveredNode>& devices) {
  m_trusted = devices;
  for (DiscoveredNode& p : m_peers) {
    p.trusted = std::any_of(devices.begin(), devices.end(),
                            [&p](const DiscoveredNode& d) { return d.deviceId == p.deviceId; });
  }
  refreshNodeRows();
}

void PoolSetupPanel::onForgotten(const QString& deviceId) {
  QString name = deviceId.left(7);
  for (const DiscoveredNode& d : m_trusted) {
    if (d.deviceId == deviceId && !d.name.isEmpty()) name = d.name;
  }
  if (const qsizetype i = m_memberIds.indexOf(deviceId); i >= 0) {
    m_memberIds.removeAt(i);
    m_members.removeAt(i);
  }
  for (DiscoveredNode& p : m_peers) {
    if (p.deviceId == deviceId) p.trusted = false;
  }
  m_trusted.removeIf([&deviceId](const DiscoveredNode& d) { return d.deviceId == deviceId; });
  // A node added by address that does not announce itself was listed only as a member.
  m_peers.removeIf([&deviceId](const DiscoveredNode& p) {
    return p.deviceId == deviceId && p.summary.isEmpty() && !p.trusted;
  });
  refreshNodeRows();
  setStatus(tr("Forgot %1: it is no longer trusted (pair again to use it).").arg(name));
}

void PoolSetupPanel::onNodeAdded(const QString& deviceId, const QString& name,
                                 const QString& address) {
  if (!m_memberIds.contains(deviceId)) {
    m_memberIds << deviceId;
    m_members << tr("%1 (%2)").arg(name, address);
  }
  // A node added by address may not announce itself (no discovery): list it too.
  bool listed = false;
  for (const DiscoveredNode& p : m_peers) listed = listed || p.deviceId == deviceId;
  if (!listed) {
    DiscoveredNode n;
    n.deviceId = deviceId;
    n.name = name;
    n.address = address;
    n.trusted = true;
    m_peers.push_back(n);
  }
  refreshNodeRows();
  m_address->clear();
  setStatus(tr("%1 joined the pool (%n node(s)). Preview the plan to use it.", nullptr,
               static_cast<int>(m_memberIds.size()))
                .arg(name));
}

void PoolSetupPanel::refreshNodeRows() {
  m_nodes->clear();
  // Heard on the LAN (or added by address), then trusted but not heard.
  QList<DiscoveredNode> rows = m_peers;
  for (const DiscoveredNode& t : m_trusted) {
    const bool listed = std::any_of(rows.begin(), rows.end(), [&t](const DiscoveredNode& p) {
      return p.deviceId == t.deviceId;
    });
    if (!listed) rows.push_back(t);
  }
  for (const DiscoveredNode& p : rows) {
    auto* item = new QTreeWidgetItem(m_nodes);
    item->setText(0, p.name.isEmpty() ? p.deviceId.left(7) : p.name);
    item->setToolTip(0, p.deviceId + (p.summary.isEmpty() ? QString() : '\n' + p.summary));
    item->setText(1, p.address);
    const bool member = m_memberIds.contains(p.deviceId);
    item->setText(2, member ? tr("in the pool") : p.trusted ? tr("trusted") : tr("not paired"));
    if (p.trusted) {
      auto* forget = new QPushButton(tr("Forget"));
      forget->setObjectName("forgetButton");
      forget->setToolTip(tr("Un-pair: stop trusting this device (pair again to use it)"));
      const QString id = p.deviceId;
      connect(forget, &QPushButton::clicked, this, [this, id] {
        setStatus(tr("Forgetting %1…").arg(id.left(7)));
        emit forgetRequested(id);
      });
      m_nodes->setItemWidget(item, 4, forget);
    }
    if (member || p.address.isEmpty()) continue;
    auto* button = new QPushButton(p.trusted ? tr("Add") : tr("Pair…"));
    button->setObjectName(p.trusted ? "addPeerButton" : "pairPeerButton");
    const DiscoveredNode node = p;
    connect(button, &QPushButton::clicked, this, [this, node] {
      if (node.trusted) {
        setStatus(tr("Connecting to %1…").arg(node.address));
        emit addNodeRequested(node.address);
      } else {
        openPairDialog(node.address, node.name);
      }
    });
    m_nodes->setItemWidget(item, 3, button);
  }
}

void PoolSetupPanel::showPlan(const PlanPreview& p) {
  if (!p.feasible) {
    m_plan->setText(tr("%1 does not fit this pool: %2").arg(p.modelName, p.reason));
    m_deploy->setEnabled(false);
    setStatus(QString());
    return;
  }
  QStringList lines;
  lines << tr("%1: predicted %2 tokens/s, %3 ms per token through %n stage(s)", nullptr,
              static_cast<int>(p.stages.size()))
               .arg(p.modelName)
               .arg(p.tokensPerS, 0, 'f', 1)
               .arg(p.latencyMs, 0, 'f', 1);
  for (const PlanStagePreview& s : p.stages) lines << stageLine(s);
  m_plan->setText(lines.join('\n'));
  m_deploy->setEnabled(!m_busy);
  setStatus(tr("Deploy to load these layers on the nodes."));
}

void PoolSetupPanel::showDeployProgress(const DeployStatus& s) {
  if (s.stages <= 0) return;
  const double within =
      s.stageDone ? 1.0
                  : (s.bytesTotal > 0 ? static_cast<double>(s.bytesSent) / s.bytesTotal : 0.0);
  m_progress->setValue(static_cast<int>(kProgressSteps * (s.stage + within) / s.stages));
  if (s.stageDone) {
    setStatus(tr("Stage %1 of %2 ready on %3").arg(s.stage + 1).arg(s.stages).arg(s.nodeName));
  } else {
    setStatus(tr("Sending weights to %1: %2 of %3")
                  .arg(s.nodeName, formatBytes(static_cast<uint64_t>(s.bytesSent)),
                       formatBytes(static_cast<uint64_t>(s.bytesTotal))));
  }
}

void PoolSetupPanel::onDeployed(const PlanPreview& plan) {
  m_busy = false;
  m_progress->setValue(kProgressSteps);
  m_preview->setEnabled(true);
  setStatus(tr("Deployed %1 over %n stage(s).", nullptr, static_cast<int>(plan.stages.size()))
                .arg(plan.modelName));
}

void PoolSetupPanel::showError(const QString& text) {
  if (m_busy) {
    m_busy = false;
    m_preview->setEnabled(true);
  }
  setStatus(tr("⚠ %1").arg(text));
}

}  // namespace shoal::gui
