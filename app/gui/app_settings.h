#pragma once
// The app-wide settings (not a conversation's): compute, models, this node, the API server.
// Kept with QSettings: in $SHOAL_DATA_DIR/shoal.conf when that is set (tests, portable use),
// else in the platform's place for "shoal/shoal".

#include <QString>

namespace shoal::gui {

struct AppSettings {
  int threads = 0;          // CPU threads; 0: one per physical core
  QString backend = "cpu";  // preferred backend ("cpu", "vulkan", "cuda")
  QString device;           // preferred device id of that backend; empty: its first
  // Speculative decoding's draft model: "auto" (a small model with the same vocabulary next to
  // the model or in the model folders, runtime::chooseDraftModel), "none", or a GGUF path.
  QString draftModel = "auto";
  QString modelsDir;        // where the model manager lists and adds models
  QString nodeName;         // this machine's name in a pool; empty: the host name
  bool apiEnabled = false;  // serve the OpenAI-compatible API over the loaded model
  QString apiHost = "127.0.0.1";
  int apiPort = 8080;  // 0: any free port

  static AppSettings load();
  void save() const;
  // The models directory to use (listing, adding, downloads): modelsDir; else $SHOAL_MODELS_DIR;
  // else the folder that holds the default model, when the user may write there
  // (engine/model/default_model.h); else the user's models dir
  // ($XDG_DATA_HOME/shoal/models), where every program looks.
  QString effectiveModelsDir() const;
};

}  // namespace shoal::gui
