#include "app/gui/pipeline_diagram.h"

#include <QFontMetrics>
#include <QPainter>
#include <QPalette>
#include <algorithm>

namespace shoal::gui {
namespace {

constexpr int kBarHeight = 34;
constexpr int kMargin = 8;
constexpr int kTextLine = 18;
constexpr int kLabelGap = 12;   // between two device labels under the bar
constexpr int kLabelSlack = 4;  // rounding of text widths: a label that fits is never elided

}  // namespace

PipelineDiagram::PipelineDiagram(QWidget* parent) : QWidget(parent) {
  setObjectName("pipelineDiagram");
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QColor PipelineDiagram::deviceColor(int index) {
  // Distinct hues that read on light and dark backgrounds alike.
  static const QColor kColors[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e),
                                   QColor(0x2c, 0xa0, 0x2c), QColor(0xd6, 0x27, 0x28),
                                   QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b),
                                   QColor(0xe3, 0x77, 0xc2), QColor(0x17, 0xbe, 0xcf)};
  constexpr int kCount = static_cast<int>(std::size(kColors));
  return kColors[((index % kCount) + kCount) % kCount];
}

void PipelineDiagram::setSnapshot(const lan::PoolSnapshot& snapshot) {
  m_layers = snapshot.modelLayers;
  m_segments.clear();
  std::vector<const lan::DeviceTelemetry*> stages;
  for (const lan::DeviceTelemetry& d : snapshot.devices) {
    if (d.firstLayer >= 0 && d.lastLayer > d.firstLayer) stages.push_back(&d);
  }
  std::sort(stages.begin(), stages.end(),
            [](const auto* a, const auto* b) { return a->firstLayer < b->firstLayer; });
  for (size_t i = 0; i < stages.size(); ++i) {
    const lan::DeviceTelemetry& d = *stages[i];
    m_segments.push_back({QString("%1 · %2").arg(QString::fromStdString(d.nodeName),
                                                 QString::fromStdString(d.deviceId)),
                          d.firstLayer, d.lastLayer, deviceColor(static_cast<int>(i))});
    m_layers = std::max(m_layers, d.lastLayer);
  }
  // One label per boundary: the link from the stage's node to the next stage's node.
  m_links.clear();
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    QString label = tr("same node");
    for (const lan::LinkTelemetry& l : snapshot.links) {
      if (l.fromNodeId == stages[i]->nodeId && l.toNodeId == stages[i + 1]->nodeId &&
          l.fromNodeId != l.toNodeId) {
        // A direct hop goes node to node; a relayed one through this coordinator (its RTT).
        label = l.direct ? tr("direct") : tr("%1 ms via here").arg(l.rttMs, 0, 'f', 1);
      }
    }
    m_links << label;
  }
  update();
}

QSize PipelineDiagram::sizeHint() const { return {600, minimumSizeHint().height()}; }

QSize PipelineDiagram::minimumSizeHint() const {
  return {200, kMargin * 2 + kTextLine * 2 + kBarHeight};
}

void PipelineDiagram::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette& pal = palette();
  const QRect bar(kMargin, kMargin + kTextLine, width() - 2 * kMargin, kBarHeight);
  p.setPen(pal.color(QPalette::Mid));
  p.setBrush(pal.color(QPalette::AlternateBase));
  p.drawRect(bar);
  if (m_layers <= 0 || m_segments.isEmpty()) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(bar, Qt::AlignCenter, tr("No model deployed on the pool"));
    return;
  }
  const auto xOf = [&](int layer) {
    return bar.left() + static_cast<int>(static_cast<double>(bar.width()) * layer / m_layers);
  };
  for (int i = 0; i < m_segments.size(); ++i) {
    const Segment& s = m_segments[i];
    const QRect r(xOf(s.firstLayer), bar.top(), xOf(s.lastLayer) - xOf(s.firstLayer), bar.height());
    p.setPen(Qt::NoPen);
    p.setBrush(s.color);
    p.drawRect(r);
    p.setPen(Qt::white);
    p.drawText(r, Qt::AlignCenter, QString("%1–%2").arg(s.firstLayer).arg(s.lastLayer - 1));
  }
  // Device labels under the bar: centred on their segment at their full width, then moved right
  // just enough not to cover the previous one, and elided only when the bar is out of room (a
  // one-layer stage would otherwise show "ch · cp").
  const QFontMetrics fm = p.fontMetrics();  // what drawText measures with
  int previousRight = bar.left() - kLabelGap;
  for (int i = 0; i < m_segments.size(); ++i) {
    const Segment& s = m_segments[i];
    const int centre = (xOf(s.firstLayer) + xOf(s.lastLayer)) / 2;
    const int remaining = static_cast<int>(m_segments.size()) - i;  // this label and those after
    const int room = std::max(0, (bar.right() - previousRight - kLabelGap) / remaining);
    int w = std::min(fm.boundingRect(s.label).width() + kLabelSlack,
                     std::max(room, xOf(s.lastLayer) - xOf(s.firstLayer)));
    // Never over the previous label; within the bar when it can be.
    const int left = std::max(std::max(previousRight + kLabelGap, bar.left()),
                              std::min(centre - w / 2, bar.right() - w));
    if (left + w > bar.right()) w = std::max(0, bar.right() - left);
    p.setPen(pal.color(QPalette::WindowText));
    p.drawText(QRect(left, bar.bottom() + 2, w, kTextLine), Qt::AlignHCenter | Qt::AlignTop,
               fm.elidedText(s.label, Qt::ElideRight, w));
    previousRight = left + w;
  }
  for (int i = 0; i < m_links.size() && i + 1 < m_segments.size(); ++i) {
    const int x = xOf(m_segments[i + 1].firstLayer);
    p.setPen(pal.color(QPalette::WindowText));
    p.drawLine(x, bar.top() - 4, x, bar.bottom());
    p.drawText(QRect(x - 60, kMargin, 120, kTextLine), Qt::AlignCenter,
               QString::fromUtf8("\u21c4 ") + m_links[i]);
  }
}

}  // namespace shoal::gui
