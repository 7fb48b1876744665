#include "app/gui/model_path.h"

#include <QDir>

namespace shoal::gui {

QString defaultModelPath() {
  const QByteArray model = qgetenv("SHOAL_MODEL");
  if (!model.isEmpty()) return QString::fromLocal8Bit(model);
  QString dir = QStringLiteral(SHOAL_DEFAULT_MODELS_DIR);
  const QByteArray modelsDir = qgetenv("SHOAL_MODELS_DIR");
  if (!modelsDir.isEmpty()) dir = QString::fromLocal8Bit(modelsDir);
  return QDir(dir).filePath("SmolLM2-135M-Instruct.Q4_1.gguf");
}

}  // namespace shoal::gui
