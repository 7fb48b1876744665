#include "app/gui/chat_input.h"

#include <QKeyEvent>

namespace shoal::gui {

ChatInput::ChatInput(QWidget* parent) : QPlainTextEdit(parent) {
  setPlaceholderText(tr("Message (Enter sends, Shift+Enter for a new line, Esc stops)"));
  setTabChangesFocus(true);
}

void ChatInput::keyPressEvent(QKeyEvent* event) {
  const bool enter = event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter;
  if (enter && !(event->modifiers() & Qt::ShiftModifier)) {
    emit sendRequested();
    return;
  }
  if (event->key() == Qt::Key_Escape) {
    emit stopRequested();
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

}  // namespace shoal::gui
