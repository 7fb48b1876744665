#pragma once
// Where the app finds its model when none is given with -m. Same rule as shoal-cli:
// $SHOAL_MODEL, else SmolLM2-135M-Instruct.Q4_1.gguf in $SHOAL_MODELS_DIR or in the models/
// folder of the source tree the app was built from.

#include <QString>

namespace shoal::gui {

QString defaultModelPath();

}  // namespace shoal::gui
