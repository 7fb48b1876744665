#pragma once
// The model's layers as one horizontal bar, each device's range in its colour, with the round
// trip time of the link between consecutive stages drawn over the boundary between them.

#include <QColor>
#include <QList>
#include <QString>
#include <QWidget>

#include "lan/pool/telemetry.h"

namespace shoal::gui {

class PipelineDiagram : public QWidget {
  Q_OBJECT

 public:
  struct Segment {
    QString label;  // "node · device"
    int firstLayer = 0;
    int lastLayer = 0;  // exclusive
    QColor color;
  };

  explicit PipelineDiagram(QWidget* parent = nullptr);

  void setSnapshot(const lan::PoolSnapshot& snapshot);
  const QList<Segment>& segments() const { return m_segments; }  // in layer order
  const QStringList& linkLabels() const { return m_links; }      // "12.3 ms" per boundary
  int modelLayers() const { return m_layers; }

  // The colour of the i-th device (stage order), shared with the device cards.
  static QColor deviceColor(int index);

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QList<Segment> m_segments;
  QStringList m_links;
  int m_layers = 0;
};

}  // namespace shoal::gui
