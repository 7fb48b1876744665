#pragma once
// Where the app finds its model when none is given with -m: the rule of every Shoal program
// (engine/model/default_model.h).

#include <QString>

namespace shoal::gui {

QString defaultModelPath();

}  // namespace shoal::gui
