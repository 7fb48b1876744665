#pragma once
// A loaded model: the mapped GGUF file with its architecture, bound weights, tokenizer and chat
// template. Immutable after load, so stages and sessions on several threads may share it.

#include <filesystem>
#include <memory>

#include "engine/gguf/gguf_file.h"
#include "engine/model/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/tokenizer.h"

namespace shoal::model {

class Model {
 public:
  // Open, validate and bind everything; throws shoal::Error with the file name and the reason.
  static std::unique_ptr<Model> load(const std::filesystem::path& path);

  const gguf::File& file() const { return m_file; }
  const ModelConfig& config() const { return m_config; }
  const ModelWeights& weights() const { return m_weights; }
  const Tokenizer& tokenizer() const { return *m_tokenizer; }
  const ChatTemplate& chatTemplate() const { return m_chatTemplate; }
  const std::filesystem::path& path() const { return m_path; }

 private:
  Model(std::filesystem::path path, gguf::File file);

  std::filesystem::path m_path;
  gguf::File m_file;
  ModelConfig m_config;
  ModelWeights m_weights;
  std::unique_ptr<Tokenizer> m_tokenizer;
  ChatTemplate m_chatTemplate;
};

}  // namespace shoal::model
