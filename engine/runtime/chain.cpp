#include "engine/runtime/chain.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace shoal::runtime {

Chain::Chain(std::vector<std::unique_ptr<Stage>> stages) : m_stages(std::move(stages)) {
  if (m_stages.empty()) throw Error("a chain needs at least one stage");
  if (!m_stages.front()->spec().hasEmbedding)
    throw Error("the first stage must hold the embedding");
  if (!m_stages.back()->spec().hasHead) throw Error("the last stage must hold the output head");
  for (size_t i = 1; i < m_stages.size(); ++i) {
    const StageSpec& prev = m_stages[i - 1]->spec();
    const StageSpec& next = m_stages[i]->spec();
    if (prev.lastLayer != next.firstLayer) {
      throw Error("stages do not join: stage " + std::to_string(i - 1) + " ends at layer " +
                  std::to_string(prev.lastLayer) + ", stage " + std::to_string(i) +
                  " starts at layer " + std::to_string(next.firstLayer));
    }
    if (prev.hasHead || next.hasEmbedding) {
      throw Error("only the first stage may hold the embedding and only the last the head");
    }
  }
}

int32_t Chain::contextLength() const {
  int32_t n = m_stages.front()->spec().contextLength;
  for (const auto& s : m_stages) n = std::min(n, s->spec().contextLength);
  return n;
}

int32_t Chain::maxBatch() const {
  int32_t n = m_stages.front()->spec().maxBatch;
  for (const auto& s : m_stages) n = std::min(n, s->spec().maxBatch);
  return n;
}

void Chain::forward(int32_t sequence, int32_t firstPosition, std::span<const int32_t> tokens,
                    std::vector<float>& logits, bool allLogits) {
  if (tokens.empty()) throw Error("Chain::forward: no tokens");
  const size_t batch = static_cast<size_t>(maxBatch());
  logits.clear();
  for (size_t start = 0; start < tokens.size(); start += batch) {
    const size_t count = std::min(batch, tokens.size() - start);
    const bool lastBatch = start + count == tokens.size();
    StageInput in;
    in.sequence = sequence;
    in.firstPosition = firstPosition + static_cast<int32_t>(start);
    in.count = static_cast<int32_t>(count);
    in.tokens = tokens.subspan(start, count);
    in.allLogits = allLogits;
    for (size_t i = 0; i < m_stages.size(); ++i) {
      StageOutput& out = m_scratch[i % 2];
      if (i > 0) in.hidden = m_scratch[(i - 1) % 2].hidden;
      m_stages[i]->forward(in, out);
    }
    const StageOutput& last = m_scratch[(m_stages.size() - 1) % 2];
    if (allLogits) {
      logits.insert(logits.end(), last.logits.begin(), last.logits.end());
    } else if (lastBatch) {
      logits = last.logits;
    }
  }
}

void Chain::truncate(int32_t sequence, int32_t fromPosition) {
  for (auto& s : m_stages) s->truncate(sequence, fromPosition);
}

}  // namespace shoal::runtime
