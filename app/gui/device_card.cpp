#include "app/gui/device_card.h"

#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QProgressBar>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "app/gui/model_catalog.h"

namespace shoal::gui {
namespace {

constexpr int kChartHeight = 120;
constexpr int kMemoryBarHeight = 8;
constexpr int kCardWidth = 300;
constexpr int kMaxCardWidth = 560;
constexpr int kSwatch = 14;
constexpr double kMinRateAxis = 10.0;  // tokens/s axis never shorter than this

// Drops samples older than the window and shows the rest at x = seconds before `now`.
void plot(QLineSeries* series, QList<QPointF>& samples, double now, double window) {
  while (!samples.isEmpty() && samples.front().x() < now - window) samples.pop_front();
  QList<QPointF> shown;
  shown.reserve(samples.size());
  for (const QPointF& p : samples) shown.push_back({p.x() - now, p.y()});
  series->replace(shown);
}

}  // namespace

DeviceCard::DeviceCard(const QColor& color, QWidget* parent) : QFrame(parent) {
  setFrameShape(QFrame::StyledPanel);
  setObjectName("deviceCard");
  setMinimumWidth(kCardWidth);
  setMaximumWidth(kMaxCardWidth);
  auto* layout = new QVBoxLayout(this);
  // A swatch of the device's colour in the pipeline diagram; the rest follows the palette.
  m_swatch = new QLabel;
  m_swatch->setObjectName("cardSwatch");
  m_swatch->setFixedSize(kSwatch, kSwatch);
  setColor(color);
  m_title = new QLabel;
  m_title->setObjectName("cardTitle");
  QFont bold = m_title->font();
  bold.setBold(true);
  m_title->setFont(bold);
  m_title->setWordWrap(true);
  m_detail = new QLabel;
  m_detail->setObjectName("cardDetail");
  m_layers = new QLabel;
  m_layers->setObjectName("cardLayers");
  m_memoryText = new QLabel;
  m_memoryText->setObjectName("cardMemoryText");
  m_memory = new QProgressBar;
  m_memory->setObjectName("cardMemory");
  m_memory->setRange(0, 1000);
  m_memory->setTextVisible(false);  // the label says it; text on the bar is hard to read
  m_memory->setFixedHeight(kMemoryBarHeight);

  m_utilization = new QLineSeries;
  m_utilization->setName(tr("busy %"));
  m_tokens = new QLineSeries;
  m_tokens->setName(tr("tokens/s"));
  m_chart = new QChart;
  m_chart->addSeries(m_utilization);
  m_chart->addSeries(m_tokens);
  m_chart->setMargins(QMargins(0, 0, 0, 0));
  m_chart->legend()->setAlignment(Qt::AlignBottom);
  m_chart->setBackgroundRoundness(0);
  m_time = new QValueAxis;
  m_time->setRange(-kWindowSeconds, 0);
  m_time->setLabelFormat("%d s");
  m_time->setTickCount(4);
  m_percent = new QValueAxis;
  m_percent->setRange(0, 100);
  m_percent->setLabelFormat("%d%%");
  m_percent->setTickCount(3);
  m_rate = new QValueAxis;
  m_rate->setRange(0, kMinRateAxis);
  m_rate->setLabelFormat("%.0f");
  m_rate->setTickCount(3);
  m_chart->addAxis(m_time, Qt::AlignBottom);
  m_chart->addAxis(m_percent, Qt::AlignLeft);
  m_chart->addAxis(m_rate, Qt::AlignRight);
  m_utilization->attachAxis(m_time);
  m_utilization->attachAxis(m_percent);
  m_tokens->attachAxis(m_time);
  m_tokens->attachAxis(m_rate);
  m_chartView = new QChartView(m_chart);
  m_chartView->setObjectName("cardChart");
  m_chartView->setRenderHint(QPainter::Antialiasing);
  m_chartView->setMinimumSize(kCardWidth / 2, kChartHeight);
  m_chartView->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);

  auto* titleRow = new QHBoxLayout;
  titleRow->addWidget(m_swatch, 0, Qt::AlignTop);
  titleRow->addWidget(m_title, 1);
  layout->addLayout(titleRow);
  layout->addWidget(m_detail);
  layout->addWidget(m_layers);
  layout->addWidget(m_memoryText);
  layout->addWidget(m_memory);
  layout->addWidget(m_chartView, 1);
  applyPalette();
}

void DeviceCard::applyPalette() {
  // Follow the system palette (light or dark): the chart draws its own colours otherwise.
  const QPalette& pal = palette();
  m_chart->setBackgroundBrush(pal.base());
  m_chart->legend()->setLabelColor(pal.text().color());
  for (QValueAxis* a : {m_time, m_percent, m_rate}) {
    a->setLabelsColor(pal.text().color());
    a->setGridLineColor(pal.color(QPalette::Mid));
  }
}

void DeviceCard::changeEvent(QEvent* event) {
  QFrame::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) applyPalette();
}

void DeviceCard::setColor(const QColor& color) {
  if (color == m_color) return;
  m_color = color;
  m_swatch->setStyleSheet(QString("background: %1; border-radius: 3px;").arg(color.name()));
}

QString DeviceCard::layerText() const { return m_layers->text(); }

void DeviceCard::addSample(const lan::DeviceTelemetry& d, qint64 unixMs) {
  m_title->setText(QString("%1 — %2").arg(QString::fromStdString(d.nodeName),
                                          QString::fromStdString(d.deviceName)));
  m_detail->setText(tr("%1 · %2 · queue %3")
                        .arg(QString::fromStdString(d.backend), QString::fromStdString(d.deviceId))
                        .arg(d.queueDepth));
  m_layers->setText(d.firstLayer >= 0 && d.lastLayer > d.firstLayer
                        ? tr("layers %1–%2 (%3)")
                              .arg(d.firstLayer)
                              .arg(d.lastLayer - 1)
                              .arg(d.lastLayer - d.firstLayer)
                        : tr("no layers"));
  const double used = d.memoryTotal > 0
                          ? static_cast<double>(d.memoryUsed) / static_cast<double>(d.memoryTotal)
                          : 0.0;
  m_memory->setValue(static_cast<int>(std::clamp(used, 0.0, 1.0) * 1000));
  m_memoryText->setText(
      tr("memory %1 of %2").arg(formatBytes(d.memoryUsed), formatBytes(d.memoryTotal)));

  if (m_originMs < 0) m_originMs = unixMs;
  const double t = static_cast<double>(unixMs - m_originMs) / 1000.0;
  m_busySamples.push_back({t, std::clamp(d.busyFraction, 0.0, 1.0) * 100.0});
  m_rateSamples.push_back({t, std::max(0.0, d.tokensPerS)});
  plot(m_utilization, m_busySamples, t, kWindowSeconds);
  plot(m_tokens, m_rateSamples, t, kWindowSeconds);
  double top = kMinRateAxis;
  for (const QPointF& p : m_rateSamples) top = std::max(top, p.y() * 1.2);
  m_rate->setRange(0, top);
}

}  // namespace shoal::gui
