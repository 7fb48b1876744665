#include "app/gui/app_settings.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QSysInfo>
#include <memory>

#include "app/gui/model_path.h"
#include "engine/model/default_model.h"

namespace shoal::gui {
namespace {

std::unique_ptr<QSettings> openSettings() {
  const QByteArray dir = qgetenv("SHOAL_DATA_DIR");
  if (!dir.isEmpty()) {
    return std::make_unique<QSettings>(QDir(QString::fromLocal8Bit(dir)).filePath("shoal.conf"),
                                       QSettings::IniFormat);
  }
  return std::make_unique<QSettings>(QStringLiteral("shoal"), QStringLiteral("shoal"));
}

}  // namespace

AppSettings AppSettings::load() {
  const auto s = openSettings();
  AppSettings a;
  a.threads = s->value("compute/threads", a.threads).toInt();
  a.backend = s->value("compute/backend", a.backend).toString();
  a.device = s->value("compute/device", a.device).toString();
  a.draftModel = s->value("compute/draft_model", a.draftModel).toString();
  a.modelsDir = s->value("models/dir", a.modelsDir).toString();
  a.nodeName = s->value("node/name", QSysInfo::machineHostName()).toString();
  a.apiEnabled = s->value("api/enabled", a.apiEnabled).toBool();
  a.apiHost = s->value("api/host", a.apiHost).toString();
  a.apiPort = s->value("api/port", a.apiPort).toInt();
  return a;
}

void AppSettings::save() const {
  const auto s = openSettings();
  s->setValue("compute/threads", threads);
  s->setValue("compute/backend", backend);
  s->setValue("compute/device", device);
  s->setValue("compute/draft_model", draftModel);
  s->setValue("models/dir", modelsDir);
  s->setValue("node/name", nodeName);
  s->setValue("api/enabled", apiEnabled);
  s->setValue("api/host", apiHost);
  s->setValue("api/port", apiPort);
  s->sync();
}

QString AppSettings::effectiveModelsDir() const {
  if (!modelsDir.isEmpty()) return modelsDir;
  // The folder the user named for every program first (defaultModelDirs searches it first).
  if (const QString env = qEnvironmentVariable("SHOAL_MODELS_DIR"); !env.isEmpty()) return env;
  // Where the default model is, when a searched folder the user may write has it (a source
  // build's models/); else the user's data dir, which every program searches: so what the app
  // downloads there is found by shoal-cli and by the app's next start. A system-wide copy
  // (/usr/share/shoal/models) is read-only: downloads could not land beside it.
  const QFileInfo found(defaultModelPath());
  if (found.isFile() && QFileInfo(found.absolutePath()).isWritable()) return found.absolutePath();
  const QString user = QString::fromStdString(model::userModelsDir());
  return user.isEmpty() ? found.absolutePath() : user;
}

}  // namespace shoal::gui
