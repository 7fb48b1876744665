#include "app/gui/models_page.h"

#include <QFileInfo>

#include "app/gui/hub_search_panel.h"
#include "app/gui/model_manager.h"

namespace shoal::gui {

ModelsPage::ModelsPage(const QString& modelsDirectory, const QString& nodeConfigDir,
                       std::function<plan::Pool()> currentPool, QWidget* parent)
    : QTabWidget(parent) {
  setObjectName("modelsPage");
  m_local = new ModelManager(modelsDirectory);
  m_local->setObjectName("modelManager");
  // The directory is asked at each download: Settings may have changed it since.
  m_discover = new HubSearchPanel([this] { return m_local->modelsDirectory(); }, nodeConfigDir,
                                  std::move(currentPool));
  m_discover->setObjectName("hubSearchPanel");
  addTab(m_local, tr("Local"));
  addTab(m_discover, tr("Discover"));
  connect(m_discover, &HubSearchPanel::downloaded, this, [this](const QString& path) {
    m_local->refreshAndSelect(QFileInfo(path).fileName());
    showLocal();
  });
}

void ModelsPage::showLocal() { setCurrentWidget(m_local); }

void ModelsPage::showDiscover() { setCurrentWidget(m_discover); }

}  // namespace shoal::gui
