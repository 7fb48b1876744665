#include "app/gui/model_catalog.h"

#include <QDir>
#include <QFileInfo>
#include <algorithm>
#include <exception>
#include <map>

#include "app/gui/chat_types.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/model_config.h"
#include "engine/model/parameter_count.h"
#include "engine/plan/fit.h"
#include "kernels/backend_registry.h"
#include "lan/pool/pool_builder.h"

namespace shoal::gui {
namespace {

// Free memory unknown (0): not checked, as before the planner gave the verdict.
constexpr double kUnknownMemoryBytes = 1e18;

// llama.cpp's `llama_ftype` values as written to general.file_type (llama.h), by their names.
QString fileTypeName(int64_t fileType) {
  static const std::map<int64_t, const char*> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
  };
  const auto it = kNames.find(fileType);
  return it == kNames.end() ? QString() : QString::fromLatin1(it->second);
}

// The type holding most of the weight bytes, for files without general.file_type.
QString dominantTensorType(const gguf::File& file) {
  std::map<gguf::TensorType, size_t> bytes;
  for (const gguf::TensorInfo& t : file.tensors()) bytes[t.type] += t.nbytes;
  if (bytes.empty()) return {};
  const auto it = std::max_element(
      bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return QString::fromStdString(gguf::typeName(it->first)).toUpper();
}

}  // namespace

ModelEntry describeModel(const QString& path, quint64 freeMemoryBytes) {
  ModelEntry e;
  const QFileInfo info(path);
  e.path = info.absoluteFilePath();
  e.fileName = info.fileName();
  e.fileBytes = info.size();
  try {
    const gguf::File file = gguf::File::open(path.toStdString());
    e.architecture = QString::fromStdString(file.getStringOr("general.architecture", ""));
    e.quantization = fileTypeName(file.getIntOr("general.file_type", -1));
    if (e.quantization.isEmpty()) e.quantization = dominantTensorType(file);
    for (const gguf::TensorInfo& t : file.tensors()) e.weightBytes += t.nbytes;
    // The same verdict the Discover tab gives before a download (plan::estimateFit), on this
    // computer's free memory; the speed figures do not matter for "runs or not".
    plan::Pool thisComputer;
    thisComputer.devices.push_back(
        {"cpu", "this-computer",
         freeMemoryBytes > 0 ? static_cast<double>(freeMemoryBytes) : kUnknownMemoryBytes,
         lan::kFallbackBandwidthBytesPerS, lan::kFallbackFlopsPerS});
    const plan::FitEstimate fit = plan::estimateFit(file, thisComputer, kMaxChatContext);
    e.kvCacheBytes = static_cast<quint64>(fit.kvCacheBytes);
    if (!fit.reason.empty() && fit.missingBytes <= 0) {
      e.problem = QObject::tr("Cannot run: %1").arg(QString::fromStdString(fit.reason));
      return e;
    }
    const model::ModelConfig c = model::ModelConfig::fromGguf(file);
    e.contextLength = c.nCtxTrain;
    e.layers = c.nLayer;
    e.experts = c.nExpert;
    e.expertsUsed = c.nExpertUsed;
    const model::ParameterCount params = model::countParameters(file, c);
    e.parameters = params.total;
    e.activeParameters = params.active;
    if (!fit.runs) {
      const quint64 needed = e.weightBytes + e.kvCacheBytes;
      e.problem = QObject::tr(
                      "Does not fit in memory: needs %1 (weights %2 + KV cache %3), %4 "
                      "free — %5 short")
                      .arg(formatBytes(needed), formatBytes(e.weightBytes),
                           formatBytes(e.kvCacheBytes), formatBytes(freeMemoryBytes),
                           formatBytes(static_cast<quint64>(fit.missingBytes)));
      return e;
    }
  } catch (const std::exception& ex) {
    e.problem = QObject::tr("Cannot run: %1").arg(QString::fromStdString(ex.what()));
    return e;
  }
  e.runnable = true;
  return e;
}

QList<ModelEntry> scanModels(const QString& directory, quint64 freeMemoryBytes) {
  QList<ModelEntry> out;
  const QFileInfoList files =
      QDir(directory).entryInfoList({"*.gguf"}, QDir::Files | QDir::Readable, QDir::Name);
  for (const QFileInfo& f : files)
    out.push_back(describeModel(f.absoluteFilePath(), freeMemoryBytes));
  return out;
}

quint64 availableMemoryBytes() {
  try {
    const auto cpu = kernels::createBackend("cpu", kernels::BackendOptions{1});
    const auto devices = cpu->devices();
    return devices.empty() ? 0 : devices.front().memoryFree;
  } catch (const std::exception&) {
    return 0;
  }
}

QString formatBytes(quint64 bytes) {
  const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  return unit == 0 ? QString("%1 B").arg(bytes)
                   : QString("%1 %2").arg(v, 0, 'f', 1).arg(QString::fromLatin1(kUnits[unit]));
}

}  // namespace shoal::gui
