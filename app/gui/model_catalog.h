#pragma once
// What the model manager shows about a GGUF file, read from its header only (metadata and the
// tensor table; no weights are touched), and whether this machine can run it.

#include <QList>
#include <QString>

namespace shoal::gui {

struct ModelEntry {
  QString path;
  QString fileName;
  qint64 fileBytes = 0;   // size on disk
  QString architecture;   // general.architecture; empty when the header cannot be read
  QString quantization;   // general.file_type by llama.cpp's name ("Q4_1"), else the main
                          // tensor type
  int contextLength = 0;  // the model's training context
  int layers = 0;         // transformer blocks
  int experts = 0;        // experts per layer (0: dense) and experts per token
  int expertsUsed = 0;
  qint64 parameters = 0;        // weights in all
  qint64 activeParameters = 0;  // weights one token uses (< parameters for experts)
  quint64 weightBytes = 0;      // sum of the tensors' sizes
  quint64 kvCacheBytes = 0;     // K and V (f16) of every layer at the context the app loads with
  bool runnable = false;
  QString problem;  // why it cannot run (unreadable, unsupported, does not fit); empty if runnable
};

// Reads `path`'s header. `freeMemoryBytes` is what the weights plus the KV cache must fit in
// (0: unknown, not checked).
ModelEntry describeModel(const QString& path, quint64 freeMemoryBytes);

// Every *.gguf file of `directory`, by file name.
QList<ModelEntry> scanModels(const QString& directory, quint64 freeMemoryBytes);

// Memory available to a model on this machine now (the CPU device's free memory), 0 if unknown.
quint64 availableMemoryBytes();

// "1.2 GiB", "96.0 MiB": sizes for people.
QString formatBytes(quint64 bytes);

}  // namespace shoal::gui
