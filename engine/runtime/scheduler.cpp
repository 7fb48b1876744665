#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <exception>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

size_t commonPrefix(const std::vector<model::TokenId>& a, const std::vector<model::TokenId>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

Scheduler::Active::Active(Id id_, int32_t slot_, Request r, const model::Tokenizer& tok)
    : id(id_),
      slot(slot_),
      request(std::move(r)),
      sampler(request.options.sampler),
      text(tok, request.options.stop),
      tokens(request.prompt) {
  // The repetition penalty looks at the prompt too, as in Session::generate.
  for (model::TokenId t : request.prompt) sampler.accept(t);
  result.promptTokens = static_cast<int32_t>(request.prompt.size());
}

Scheduler::Scheduler(Chain& chain, const model::Tokenizer& tokenizer, SchedulerOptions options)
    : m_chain(chain), m_tokenizer(tokenizer), m_contextLength(chain.contextLength()) {
  int32_t slots = chain.stage(0).spec().maxSequences;
  for (size_t i = 1; i < chain.stageCount(); ++i) {
    slots = std::min(slots, chain.stage(i).spec().maxSequences);
  }
  if (slots < 1) throw Error("scheduler: the chain holds no KV slot");
  m_slots.resize(static_cast<size_t>(slots));
  m_budget = chain.maxBatch();
  if (options.tokenBudget > 0) m_budget = std::min(m_budget, options.tokenBudget);
}

Scheduler::Id Scheduler::add(Request request) {
  const auto& prompt = request.prompt;
  if (prompt.empty()) throw Error("empty prompt");
  if (static_cast<int64_t>(prompt.size()) >= m_contextLength) {
    throw Error("prompt of " + std::to_string(prompt.size()) +
                " tokens does not fit the context of " + std::to_string(m_contextLength) +
                " tokens");
  }
  for (model::TokenId t : prompt) {
    if (t < 0 || t >= m_tokenizer.size()) throw Error("prompt token id out of range");
  }
  // A sampler that cannot be built (NaN parameters) is refused here, not at admission.
  Sampler check(request.options.sampler);
  const Id id = m_nextId++;
  m_waiting.push_back({id, std::move(request), false});
  return id;
}

void Scheduler::cancel(Id id) {
  for (Waiting& w : m_waiting) {
    if (w.id == id) w.cancelled = true;
  }
  for (auto& a : m_active) {
    if (a->id == id) a->cancelled = true;
  }
}

void Scheduler::cancelAll() {
  std::deque<Waiting> waiting;
  waiting.swap(m_waiting);
  for (Waiting& w : waiting) {
    finishWaiting(w);
  }
  for (auto& a : m_active) {
    if (!a->done) finish(*a, FinishReason::Cancelled);
  }
  m_active.clear();
}

void Scheduler::finishWaiting(Waiting& w) {
  GenerateResult r;
  r.promptTokens = static_cast<int32_t>(w.request.prompt.size());
  r.finish = FinishReason::Cancelled;
  ++m_stats.cancelled;
  if (w.request.onFinish) w.request.onFinish(r, {});
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = m_stats;
  s.waiting = m_waiting.size();
  s.active = m_active.size();
  s.slotCount = m_slots.size();
  return s;
}

void Scheduler::admit() {
  // Cancelled requests leave the queue wherever they are in it.
  for (auto it = m_waiting.begin(); it != m_waiting.end();) {
    if (!it->cancelled) {
      ++it;
      continue;
    }
    Waiting w = std::move(*it);
    it = m_waiting.erase(it);
    finishWaiting(w);
  }
  while (!m_waiting.empty()) {
    // The free slot whose cache shares the longest prefix with the prompt; among equals, the
    // one freed longest ago (so a recent conversation's cache survives longest).
    const std::vector<model::TokenId>& prompt = m_waiting.front().request.prompt;
    int32_t best = -1;
    size_t bestCommon = 0;
    for (size_t i = 0; i < m_slots.size(); ++i) {
      const Slot& s = m_slots[i];
      if (s.busy) continue;
      const size_t common = commonPrefix(s.cached, prompt);
      if (best < 0 || common > bestCommon ||
          (common == bestCommon && s.lastUsed < m_slots[static_cast<size_t>(best)].lastUsed)) {
        best = static_cast<int32_t>(i);
        bestCommon = common;
      }
    }
    if (best < 0) return;  // every slot is busy: the rest wait

    Waiting w = std::move(m_waiting.front());
    m_waiting.pop_front();
    Slot& slot = m_slots[static_cast<size_t>(best)];
    // At least the last prompt token is computed again, for its logits.
    const size_t common = std::min(bestCommon, w.request.prompt.size() - 1);
    try {
      m_chain.truncate(best, static_cast<int32_t>(common));
    } catch (const std::exception& e) {
      slot.cached.clear();
      GenerateResult r;
      r.promptTokens = static_cast<int32_t>(w.request.prompt.size());
      ++m_stats.failed;
      if (w.request.onFinish) w.request.onFinish(r, e.what());
      continue;
    }
    slot.busy = true;
    slot.cached.clear();
    auto a = std::make_unique<Active>(w.id, best, std::move(w.request), m_tokenizer);
    a->computed = common;
    a->result.reusedTokens = static_cast<int32_t>(common);
    a->started = Clock::now();
    m_active.push_back(std::move(a));
  }
}

void Scheduler::release(Active& a) {
  Slot& slot = m_slots[static_cast<size_t>(a.slot)];
  slot.busy = false;
  slot.cached.assign(a.tokens.begin(), a.tokens.begin() + static_cast<ptrdiff_t>(a.computed));
  slot.lastUsed = m_stats.steps;
}

void Scheduler::finish(Active& a, FinishReason reason) {
  // What the reply text still holds back is released unless a stop string or the caller ended it.
  if (reason != FinishReason::StopString && reason != FinishReason::Cancelled) {
    bool matched = false;
    const std::string rest = a.text.finish(matched);
    if (!rest.empty()) {
      a.result.text += rest;
      if (a.request.onText) a.request.onText(rest);
    }
    if (matched) reason = FinishReason::StopString;
  }
  a.result.finish = reason;
  const auto now = Clock::now();
  if (a.result.tokens.empty()) {
    a.result.prefillSeconds = secondsBetween(a.started, now);
  } else {
    a.result.decodeSeconds = secondsBetween(a.firstToken, now);
  }
  a.done = true;
  release(a);
  if (reason == FinishReason::Cancelled) {
    ++m_stats.cancelled;
  } else {
    ++m_stats.completed;
  }
  if (a.request.onFinish) a.request.onFinish(a.result, {});
}

// The same rules, in the same order, as Session::generate's loop.
bool Scheduler::accept(Active& a, model::TokenId token) {
  const GenerateOptions& o = a.request.options;
  GenerateResult& r = a.result;
  if (r.tokens.empty()) {
    a.firstToken = Clock::now();
    r.prefillSeconds = secondsBetween(a.started, a.firstToken);
    if (o.maxTokens <= 0) {
      finish(a, FinishReason::Length);
      return true;
    }
  }
  a.sampler.accept(token);
  r.tokens.push_back(token);
  if (!o.ignoreEndOfGeneration && m_tokenizer.isEndOfGeneration(token)) {
    finish(a, FinishReason::EndOfGeneration);
    return true;
  }
  bool matched = false;
  const std::string piece = a.text.push(token, matched);
  bool stopped = false;
  if (!piece.empty()) {
    r.text += piece;
    if (a.request.onText && !a.request.onText(piece)) stopped = true;
  }
  if (matched) {
    finish(a, FinishReason::StopString);
    return true;
  }
  if (stopped) {
    finish(a, FinishReason::Cancelled);
    return true;
  }
  if (static_cast<int32_t>(r.tokens.size()) >= o.maxTokens) {
    finish(a, FinishReason::Length);
    return true;
  }
  // The token is fed back next step at position tokens.size(); that must stay in the context.
  if (static_cast<int64_t>(a.tokens.size()) + 1 >= m_contextLength) {
    finish(a, FinishReason::ContextFull);
    return true;
  }
  a.tokens.push_back(token);
  return false;
}

void Scheduler::failBatch(const std::vector<size_t>& members, const std::string& error) {
  for (size_t i : members) {
    Active& a = *m_active[i];
    // The stages before the failed one kept this step's rows: forget the whole slot.
    try {
      m_chain.truncate(a.slot, 0);
    } catch (const std::exception&) {
      // A stage in trouble; the next admission's truncate tries again.
    }
    a.computed = 0;
    a.done = true;
    release(a);  // computed is 0: the slot remembers nothing
    ++m_stats.failed;
    if (a.request.onFinish) a.request.onFinish(a.result, error);
  }
}

bool Scheduler::step() {
  // Cancellations first: their slots go to waiting requests in this very step.
  for (auto& a : m_active) {
    const bool flag =
        a->request.options.cancel && a->request.options.cancel->load(std::memory_order_relaxed);
    if (!a->done && (a->cancelled || flag)) finish(*a, FinishReason::Cancelled);
  }
  std::erase_if(m_active, [](const auto& a) { return a->done; });
  for (Waiting& w : m_waiting) {
    if (w.request.options.cancel && w.request.options.cancel->load(std::memory_order_relaxed)) {
      w.cancelled = true;
    }
  }
  admit();
  if (m_active.empty()) return false;

  // Rows: one per decoding sequence (rotating who goes first when they exceed the budget), then
  // prompt chunks in admission order with what is left.
  m_rows.clear();
  m_segments.clear();
  std::vector<size_t> members;  // m_active index of each segment
  int32_t budget = m_budget;
  const size_t n = m_active.size();
  for (size_t k = 0; k < n && budget > 0; ++k) {
    const size_t i = (m_decodeStart + k) % n;
    Active& a = *m_active[i];
    if (a.readingPrompt()) continue;
    m_rows.push_back(a.tokens[a.computed]);
    m_segments.push_back({a.slot, static_cast<int32_t>(a.computed), 1, LogitRows::Last});
    members.push_back(i);
    --budget;
  }
  m_decodeStart = n ? (m_decodeStart + 1) % n : 0;
  for (size_t i = 0; i < n && budget > 0; ++i) {
    Active& a = *m_active[i];
    if (!a.readingPrompt()) continue;
    const size_t left = a.request.prompt.size() - a.computed;
    const int32_t count = static_cast<int32_t>(std::min<size_t>(left, static_cast<size_t>(budget)));
    const bool last = static_cast<size_t>(count) == left;
    m_rows.insert(m_rows.end(), a.tokens.begin() + static_cast<ptrdiff_t>(a.computed),
                  a.tokens.begin() + static_cast<ptrdiff_t>(a.computed) + count);
    m_segments.push_back({a.slot, static_cast<int32_t>(a.computed), count,
                          last ? LogitRows::Last : LogitRows::None});
    members.push_back(i);
    budget -= count;
  }

  Batch batch;
  batch.tokens = m_rows;
  batch.segments = m_segments;
  try {
    m_chain.forwardBatch(batch, m_out);
  } catch (const std::exception& e) {
    failBatch(members, e.what());
    std::erase_if(m_active, [](const auto& a) { return a->done; });
    ++m_stats.steps;
    return true;
  }
  ++m_stats.steps;
  m_stats.rowsRun += m_rows.size();

  size_t logitRows = 0;
  for (const Segment& s : m_segments) logitRows += s.logits == LogitRows::Last ? 1 : 0;
  if (logitRows > 0 && (m_out.logits.empty() || m_out.logits.size() % logitRows != 0)) {
    failBatch(members, "the head stage returned " + std::to_string(m_out.logits.size()) +
                           " logits for " + std::to_string(logitRows) + " rows");
    std::erase_if(m_active, [](const auto& a) { return a->done; });
    return true;
  }
  const size_t vocab = logitRows ? m_out.logits.size() / logitRows : 0;
  size_t row = 0;
  for (size_t k = 0; k < m_segments.size(); ++k) {
    Active& a = *m_active[members[k]];
    a.computed += static_cast<size_t>(m_segments[k].count);
    if (m_segments[k].logits != LogitRows::Last) continue;
    const std::span<const float> logits(m_out.logits.data() + row * vocab, vocab);
    ++row;
    accept(a, a.sampler.sample(logits));
  }
  std::erase_if(m_active, [](const auto& a) { return a->done; });
  return true;
}

void Scheduler::runUntilIdle() {
  while (step()) {
  }
}

}  // namespace shoal::runtime
