#pragma once
// The pool telemetry snapshot (lan/pool/telemetry.h) as a Qt metatype, so it can travel in
// queued signals from the coordinator's thread to the pool page.

#include <QMetaType>

#include "lan/pool/telemetry.h"

Q_DECLARE_METATYPE(shoal::lan::PoolSnapshot)
