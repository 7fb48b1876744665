// shoal: the desktop app. Chat with a local GGUF model; -m picks the model (default: the
// default model, see model_path.h). Conversations are kept in the app data directory
// ($SHOAL_DATA_DIR overrides it).

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>

#include "app/gui/chat_store.h"
#include "app/gui/chat_window.h"
#include "app/gui/model_path.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName("shoal");
  QApplication::setOrganizationName("shoal");
  QApplication::setApplicationDisplayName("Shoal");
  QApplication::setDesktopFileName("shoal");
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/shoal.svg")));

  QCommandLineParser parser;
  parser.setApplicationDescription("Chat with local LLMs and pool LAN GPUs.");
  parser.addHelpOption();
  QCommandLineOption model({"m", "model"}, "GGUF model file (default: the default model).",
                           "MODEL");
  parser.addOption(model);
  parser.process(app);

  const QString path = parser.isSet(model) ? parser.value(model) : shoal::gui::defaultModelPath();
  shoal::gui::ChatWindow window(path, shoal::gui::ChatStore::defaultDirectory());
  window.show();
  return QApplication::exec();
}
