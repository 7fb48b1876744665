#pragma once
// The "Devices & pool" page: this machine's devices (every backend, with the reason an
// unavailable one cannot be used), and the pool as the coordinator reports it: the plan's
// predicted speed, the pipeline diagram (which device holds which layers, link RTTs), and one
// card per pooled device with memory and 60 s charts of utilization and tokens/s.
//
// Above them, the PoolSetupPanel where the user adds or pairs nodes, previews the plan and
// deploys it. attachController() wires both to a PoolController (queued both ways): its
// telemetry feeds setSnapshot() every 500 ms. setSnapshot() also takes the fake feed
// (fake_pool_feed.h) in tests.

#include <QList>
#include <QMap>
#include <QWidget>

#include "app/gui/device_list.h"
#include "app/gui/pool_types.h"
#include "lan/pool/telemetry.h"

class QHBoxLayout;
class QLabel;

namespace shoal::gui {

class DeviceCard;
class PipelineDiagram;
class PoolController;
class PoolSetupPanel;
class SharePanel;

class PoolView : public QWidget {
  Q_OBJECT

 public:
  explicit PoolView(QWidget* parent = nullptr);

  // Cards in stage order of the last snapshot.
  QList<DeviceCard*> cards() const;
  PipelineDiagram* diagram() const { return m_diagram; }
  QString planText() const;
  QString localDevicesText() const;
  // A note shown with the plan, e.g. that the feed is a demo.
  void setSourceNote(const QString& note);
  PoolSetupPanel* setupPanel() const { return m_setup; }
  // "Let other computers use this one": this computer's node's ID, address and pairing code.
  SharePanel* sharePanel() const { return m_share; }
  // Connects the setup panel's requests to `controller` and its answers and telemetry back
  // here, all queued (the controller lives on its own thread).
  void attachController(PoolController* controller);
  // The model a plan preview is made for (the chat's model).
  void setModelPath(const QString& path) { m_modelPath = path; }
  QString modelPath() const { return m_modelPath; }

 signals:
  void planRequested(const QString& modelPath);  // to PoolController::previewPlan

 public slots:
  void setSnapshot(const shoal::lan::PoolSnapshot& snapshot);
  void setLocalBackends(const QList<BackendStatus>& backends);

 private:
  PoolSetupPanel* m_setup = nullptr;
  SharePanel* m_share = nullptr;
  QString m_modelPath;
  QLabel* m_local = nullptr;
  QLabel* m_plan = nullptr;
  QLabel* m_note = nullptr;
  PipelineDiagram* m_diagram = nullptr;
  QWidget* m_cardArea = nullptr;
  QHBoxLayout* m_cardLayout = nullptr;
  QMap<QString, DeviceCard*> m_cards;  // by "nodeId/deviceId"
  QStringList m_order;                 // keys in stage order
};

}  // namespace shoal::gui
