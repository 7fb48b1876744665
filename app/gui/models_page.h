#pragma once
// The Models page: a "Local" tab (the models directory: ModelManager, with load, add, delete
// and open folder) and a "Discover" tab (the Hugging Face Hub: HubSearchPanel). A model
// downloaded in Discover shows up, selected, under Local, ready for Load.

#include <QTabWidget>
#include <functional>

#include "engine/plan/types.h"

namespace shoal::gui {

class HubSearchPanel;
class ModelManager;

class ModelsPage : public QTabWidget {
  Q_OBJECT

 public:
  // nodeConfigDir and currentPool: for the fit columns (hub_search_panel.h).
  ModelsPage(const QString& modelsDirectory, const QString& nodeConfigDir,
             std::function<plan::Pool()> currentPool, QWidget* parent = nullptr);

  ModelManager* local() const { return m_local; }
  HubSearchPanel* discover() const { return m_discover; }
  void showLocal();
  void showDiscover();

 private:
  ModelManager* m_local = nullptr;
  HubSearchPanel* m_discover = nullptr;
};

}  // namespace shoal::gui
