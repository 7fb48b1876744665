#include "app/gui/settings_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QVBoxLayout>

namespace shoal::gui {
namespace {

// Ranges the sampler accepts and a person might want; the sampler validates again.
constexpr double kMaxTemperature = 5.0;
constexpr int kMaxTopK = 1000;
constexpr int kMaxReplyTokens = 32768;

}  // namespace

SettingsPanel::SettingsPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(tr("System prompt")));
  m_systemPrompt = new QPlainTextEdit;
  m_systemPrompt->setObjectName("systemPrompt");
  m_systemPrompt->setPlaceholderText(tr("Empty: the model's default"));
  m_systemPrompt->setMaximumHeight(120);
  layout->addWidget(m_systemPrompt);

  auto* form = new QFormLayout;
  m_temperature = new QDoubleSpinBox;
  m_temperature->setObjectName("temperature");
  m_temperature->setRange(0.0, kMaxTemperature);
  m_temperature->setSingleStep(0.05);
  m_temperature->setDecimals(2);
  m_temperature->setToolTip(tr("0 picks the most likely token every time (greedy)"));
  form->addRow(tr("Temperature"), m_temperature);

  m_topP = new QDoubleSpinBox;
  m_topP->setObjectName("topP");
  m_topP->setRange(0.0, 1.0);
  m_topP->setSingleStep(0.01);
  m_topP->setDecimals(2);
  m_topP->setToolTip(tr("1 turns top-p off"));
  form->addRow(tr("Top-p"), m_topP);

  m_topK = new QSpinBox;
  m_topK->setObjectName("topK");
  m_topK->setRange(0, kMaxTopK);
  m_topK->setToolTip(tr("0 turns top-k off"));
  form->addRow(tr("Top-k"), m_topK);

  m_maxTokens = new QSpinBox;
  m_maxTokens->setObjectName("maxTokens");
  m_maxTokens->setRange(1, kMaxReplyTokens);
  form->addRow(tr("Max tokens"), m_maxTokens);

  m_seed = new QSpinBox;
  m_seed->setObjectName("seed");
  m_seed->setRange(-1, std::numeric_limits<int>::max());
  m_seed->setSpecialValueText(tr("random"));
  m_seed->setToolTip(tr("The same seed and settings give the same reply"));
  form->addRow(tr("Seed"), m_seed);

  m_thinking = new QCheckBox(tr("Think before answering"));
  m_thinking->setObjectName("thinking");
  m_thinking->setToolTip(
      tr("Reasoning models (Qwen3, gpt-oss): off asks for an answer without "
         "reasoning; gpt-oss then reasons briefly. Other models ignore it."));
  form->addRow(tr("Reasoning"), m_thinking);

  m_effort = new QComboBox;
  m_effort->setObjectName("reasoningEffort");
  m_effort->addItem(tr("Model default"), QString());
  m_effort->addItem(tr("Low"), QStringLiteral("low"));
  m_effort->addItem(tr("Medium"), QStringLiteral("medium"));
  m_effort->addItem(tr("High"), QStringLiteral("high"));
  m_effort->setToolTip(tr("How much gpt-oss reasons (its system message's \"Reasoning:\")"));
  form->addRow(tr("Reasoning effort"), m_effort);
  layout->addLayout(form);
  layout->addStretch(1);

  auto emitChanged = [this] {
    if (!m_updating) emit changed();
  };
  connect(m_systemPrompt, &QPlainTextEdit::textChanged, this, emitChanged);
  connect(m_temperature, &QDoubleSpinBox::valueChanged, this, emitChanged);
  connect(m_topP, &QDoubleSpinBox::valueChanged, this, emitChanged);
  connect(m_topK, &QSpinBox::valueChanged, this, emitChanged);
  connect(m_maxTokens, &QSpinBox::valueChanged, this, emitChanged);
  connect(m_seed, &QSpinBox::valueChanged, this, emitChanged);
  connect(m_thinking, &QCheckBox::toggled, this, emitChanged);
  connect(m_effort, &QComboBox::currentIndexChanged, this, emitChanged);
  setValues(QString(), GenerationSettings{});
}

void SettingsPanel::setValues(const QString& systemPrompt, const GenerationSettings& s) {
  m_updating = true;
  if (m_systemPrompt->toPlainText() != systemPrompt) m_systemPrompt->setPlainText(systemPrompt);
  m_temperature->setValue(s.temperature);
  m_topP->setValue(s.topP);
  m_topK->setValue(s.topK);
  m_maxTokens->setValue(s.maxTokens);
  m_seed->setValue(
      static_cast<int>(std::clamp<qint64>(s.seed, -1, std::numeric_limits<int>::max())));
  m_thinking->setChecked(s.thinking);
  // An effort this version does not offer (a database edited by hand) shows as the default.
  m_effort->setCurrentIndex(std::max(0, m_effort->findData(s.reasoningEffort)));
  m_updating = false;
}

QString SettingsPanel::systemPrompt() const { return m_systemPrompt->toPlainText(); }

GenerationSettings SettingsPanel::settings() const {
  GenerationSettings s;
  s.temperature = m_temperature->value();
  s.topP = m_topP->value();
  s.topK = m_topK->value();
  s.maxTokens = m_maxTokens->value();
  s.seed = m_seed->value();
  s.thinking = m_thinking->isChecked();
  s.reasoningEffort = m_effort->currentData().toString();
  return s;
}

}  // namespace shoal::gui
