#pragma once
// One pooled device on the pool page: its name and node, backend, a memory bar, the layers it
// holds, and a chart of its utilization (%) and tokens/s over the last 60 seconds.

#include <QColor>
#include <QFrame>
#include <QList>
#include <QPointF>

#include "lan/pool/telemetry.h"

class QLabel;
class QProgressBar;
class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;

namespace shoal::gui {

class DeviceCard : public QFrame {
  Q_OBJECT

 public:
  // `color`: the device's colour in the pipeline diagram, shown as the card's edge.
  DeviceCard(const QColor& color, QWidget* parent = nullptr);

  // One telemetry sample taken at `unixMs`; points older than kWindowSeconds are dropped.
  void addSample(const lan::DeviceTelemetry& device, qint64 unixMs);

  QLineSeries* utilizationSeries() const { return m_utilization; }  // percent
  QLineSeries* tokensSeries() const { return m_tokens; }            // tokens/s
  QString layerText() const;
  // The device's colour in the diagram changes when a deployment gives it layers (or takes them).
  void setColor(const QColor& color);
  QColor color() const { return m_color; }

  static constexpr int kWindowSeconds = 60;

 protected:
  // The chart paints its own background: repaint it from the new palette (light/dark switch).
  void changeEvent(QEvent* event) override;

 private:
  void applyPalette();

  QLabel* m_swatch = nullptr;
  QColor m_color;
  QLabel* m_title = nullptr;
  QLabel* m_detail = nullptr;  // backend, queue
  QLabel* m_layers = nullptr;
  QLabel* m_memoryText = nullptr;
  QProgressBar* m_memory = nullptr;
  QChart* m_chart = nullptr;
  QChartView* m_chartView = nullptr;
  QLineSeries* m_utilization = nullptr;
  QLineSeries* m_tokens = nullptr;
  QValueAxis* m_time = nullptr;
  QValueAxis* m_percent = nullptr;
  QValueAxis* m_rate = nullptr;
  qint64 m_originMs = -1;        // first sample; samples' x is seconds since it
  QList<QPointF> m_busySamples;  // the window's samples; the series show them relative to now
  QList<QPointF> m_rateSamples;
};

}  // namespace shoal::gui
