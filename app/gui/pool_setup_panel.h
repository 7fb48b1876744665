#pragma once
// The part of the pool page where the user builds the pool: the nodes heard on the LAN (each
// with Pair… for an untrusted one and Add for a trusted one) and the trusted devices not heard
// (each trusted row with Forget, which un-pairs it), a field to add a node by address,
// the plan the coordinator would deploy (predicted tokens/s, latency, layers per device) shown
// before it is applied, and Deploy with a progress bar for the weights sent to the nodes.
//
// It only shows state and asks: its signals are requests a PoolController carries out (queued,
// PoolView::attachController), and the controller's answers come back through its slots.

#include <QList>
#include <QWidget>

#include "app/gui/pool_types.h"

class QInputDialog;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTreeWidget;

namespace shoal::gui {

class PoolSetupPanel : public QWidget {
  Q_OBJECT

 public:
  explicit PoolSetupPanel(QWidget* parent = nullptr);

  QTreeWidget* nodeList() const { return m_nodes; }
  QLineEdit* addressField() const { return m_address; }
  QString planText() const;
  QString statusText() const;
  QPushButton* deployButton() const { return m_deploy; }
  QPushButton* previewButton() const { return m_preview; }
  QProgressBar* deployBar() const { return m_progress; }
  // The code entry of the pairing started last (nullptr when none is open).
  QInputDialog* pairDialog() const { return m_pairDialog; }
  // Members so far ("name (address)"), in the order they joined.
  QStringList members() const { return m_members; }

 signals:
  void addNodeRequested(const QString& address);
  void pairRequested(const QString& address, const QString& code);
  void previewRequested();
  void deployRequested();
  void forgetRequested(const QString& deviceId);

 public slots:
  // Opens the code entry for the node at `address`; accepting it asks to pair.
  void openPairDialog(const QString& address, const QString& name);
  void setPeers(const QList<shoal::gui::DiscoveredNode>& peers);
  void onStarted(const QString& deviceId, int listenPort);
  void onNodeAdded(const QString& deviceId, const QString& name, const QString& address);
  void onPaired(const QString& deviceId, const QString& address);
  // The trust store's devices: listed even when not heard on the LAN, so any can be forgotten.
  void setTrustedDevices(const QList<shoal::gui::DiscoveredNode>& devices);
  void onForgotten(const QString& deviceId);
  void showPlan(const shoal::gui::PlanPreview& preview);
  void showDeployProgress(const shoal::gui::DeployStatus& status);
  void onDeployed(const shoal::gui::PlanPreview& plan);
  void showError(const QString& text);

 private:
  void refreshNodeRows();
  void setStatus(const QString& text);

  QTreeWidget* m_nodes = nullptr;
  QLineEdit* m_address = nullptr;
  QPushButton* m_add = nullptr;
  QPushButton* m_pairAddress = nullptr;
  QLabel* m_plan = nullptr;
  QPushButton* m_preview = nullptr;
  QPushButton* m_deploy = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_status = nullptr;
  QInputDialog* m_pairDialog = nullptr;
  QList<DiscoveredNode> m_peers;
  QList<DiscoveredNode> m_trusted;
  QStringList m_memberIds;
  QStringList m_members;
  bool m_busy = false;  // a preview or deployment is running
};

}  // namespace shoal::gui
