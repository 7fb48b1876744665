#include "app/gui/model_path.h"

#include "engine/model/default_model.h"

namespace shoal::gui {

QString defaultModelPath() { return QString::fromStdString(model::defaultModelPath()); }

}  // namespace shoal::gui
