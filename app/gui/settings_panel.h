#pragma once
// The settings of one conversation: system prompt, sampling (temperature, top-p, top-k, max
// tokens, seed) and reasoning (thinking on/off, gpt-oss's effort). Shows the values it is given;
// emits changed() when the user edits one.

#include <QWidget>

#include "app/gui/chat_types.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;

namespace shoal::gui {

class SettingsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SettingsPanel(QWidget* parent = nullptr);

  // Show these values without emitting changed().
  void setValues(const QString& systemPrompt, const GenerationSettings& settings);
  QString systemPrompt() const;
  GenerationSettings settings() const;

 signals:
  void changed();

 private:
  QPlainTextEdit* m_systemPrompt;
  QDoubleSpinBox* m_temperature;
  QDoubleSpinBox* m_topP;
  QSpinBox* m_topK;
  QSpinBox* m_maxTokens;
  QSpinBox* m_seed;  // -1: random per reply
  QCheckBox* m_thinking;
  QComboBox* m_effort;      // "" (default), "low", "medium", "high"
  bool m_updating = false;  // true while setValues() fills the widgets
};

}  // namespace shoal::gui
