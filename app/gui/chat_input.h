#pragma once
// The message box: Enter sends, Shift+Enter inserts a newline, Esc asks to stop the reply.

#include <QPlainTextEdit>

namespace shoal::gui {

class ChatInput : public QPlainTextEdit {
  Q_OBJECT

 public:
  explicit ChatInput(QWidget* parent = nullptr);

 signals:
  void sendRequested();  // Enter (or keypad Enter) without Shift
  void stopRequested();  // Esc

 protected:
  void keyPressEvent(QKeyEvent* event) override;
};

}  // namespace shoal::gui
