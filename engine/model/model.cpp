#include "engine/model/model.h"

namespace shoal::model {

Model::Model(std::filesystem::path path, gguf::File file)
    : m_path(std::move(path)), m_file(std::move(file)) {}

std::unique_ptr<Model> Model::load(const std::filesystem::path& path) {
  std::unique_ptr<Model> m(new Model(path, gguf::File::open(path)));
  m->m_config = ModelConfig::fromGguf(m->m_file);
  m->m_weights = ModelWeights::bind(m->m_file, m->m_config);
  m->m_tokenizer = Tokenizer::create(Vocab::fromGguf(m->m_file));
  m->m_chatTemplate = detectChatTemplate(m->m_tokenizer->vocab().chatTemplate);
  return m;
}

}  // namespace shoal::model
