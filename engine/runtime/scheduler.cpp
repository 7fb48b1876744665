#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <exception>

#include "engine/error.h"
#include "engine/runtime/decode_ahead.h"

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
    : m_chain(chain),
      m_tokenizer(tokenizer),
      m_contextLength(chain.contextLength()),
      m_drafter(options.drafter),
      m_recovery(std::move(options.recovery)) {
  int32_t slots = chain.stage(0).spec().maxSequences;
  for (size_t i = 1; i < chain.stageCount(); ++i) {
    slots = std::min(slots, chain.stage(i).spec().maxSequences);
  }
  if (slots < 1) throw Error("scheduler: the chain holds no KV slot");
  m_slots.resize(static_cast<size_t>(slots));
  m_budget = chain.maxBatch();
  if (options.tokenBudget > 0) m_budget = std::min(m_budget, options.tokenBudget);
  if (m_budget <= slots) {
    throw Error("scheduler: a step of " + std::to_string(m_budget) + " rows cannot serve " +
                std::to_string(slots) + " sequences (it must have room for one more)");
  }
  // With every other slot decoding one row, a whole chunk still fits: chunks never wait forever.
  m_chunk = static_cast<size_t>(m_budget - slots + 1);
  if (m_drafter && m_drafter->slotCount() < slots) {
    throw Error("scheduler: the draft model holds " + std::to_string(m_drafter->slotCount()) +
                " KV slots for " + std::to_string(slots) + " sequences");
  }
}

size_t Scheduler::pieceEnd(const Active& a) const {
  const auto it = std::upper_bound(a.replayEnds.begin(), a.replayEnds.end(), a.computed);
  if (it != a.replayEnds.end()) return *it;
  return a.computed + std::min(a.unread(), m_chunk);
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

Scheduler::~Scheduler() {
  try {
    drainInFlight();
  } catch (...) {
    // A destructor must not throw; the stage forgets what it still holds when it goes.
  }
}

void Scheduler::cancelAll() {
  drainInFlight();
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
    size_t common = std::min(bestCommon, w.request.prompt.size() - 1);
    try {
      // The stages may keep fewer (a sliding-window ring that cannot resume there).
      common = static_cast<size_t>(m_chain.truncate(best, static_cast<int32_t>(common)));
    } catch (const std::exception& e) {
      // A stage lost since the last step (a pool node gone) fails here first: repaired as a
      // failure mid-step is, the caches start empty.
      std::string why = e.what();
      bool repaired = false;
      if (m_recovery) {
        try {
          repaired = m_recovery(e, m_chain.failedStage());
        } catch (const std::exception& again) {
          why = again.what();
        }
      }
      if (!repaired) {
        slot.cached.clear();
        slot.starts.clear();
        GenerateResult r;
        r.promptTokens = static_cast<int32_t>(w.request.prompt.size());
        ++m_stats.failed;
        if (w.request.onFinish) w.request.onFinish(r, why);
        continue;
      }
      replayEverything();
      common = 0;
    }
    slot.busy = true;
    auto a = std::make_unique<Active>(w.id, best, std::move(w.request), m_tokenizer);
    for (size_t start : slot.starts) {
      if (start < common) a->starts.push_back(start);
    }
    slot.cached.clear();
    slot.starts.clear();
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
  slot.starts = a.starts;
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

void Scheduler::failBatch(const std::vector<Active*>& members, const std::string& error) {
  for (Active* member : members) {
    Active& a = *member;
    if (a.done) continue;
    // The stages before the failed one kept this step's rows: forget the whole slot.
    try {
      m_chain.truncate(a.slot, 0);
    } catch (const std::exception&) {
      // A stage in trouble; the next admission's truncate tries again.
    }
    a.computed = 0;
    a.starts.clear();
    a.done = true;
    release(a);  // computed is 0: the slot remembers nothing
    ++m_stats.failed;
    if (a.request.onFinish) a.request.onFinish(a.result, error);
  }
}

void Scheduler::finishCancelled() {
  // Cancellations first: their slots go to waiting requests in this very step. A sequence whose
  // batch is in flight keeps its slot until the batch is back.
  for (auto& a : m_active) {
    const bool flag =
        a->request.options.cancel && a->request.options.cancel->load(std::memory_order_relaxed);
    if (!a->done && !a->inFlight && (a->cancelled || flag)) finish(*a, FinishReason::Cancelled);
  }
  std::erase_if(m_active, [](const auto& a) { return a->done; });
  for (Waiting& w : m_waiting) {
    if (w.request.options.cancel && w.request.options.cancel->load(std::memory_order_relaxed)) {
      w.cancelled = true;
    }
  }
}

void Scheduler::collectPieces(const std::vector<Active*>& candidates, size_t most,
                              std::vector<Piece>& pieces) {
  pieces.clear();
  m_pieceDraftSeconds = 0;
  int32_t budget = m_budget;
  const size_t n = candidates.size();
  // One row per decoding sequence (rotating who goes first when they exceed the budget or the
  // count), then chunks of what the others still have to read (a prompt, or everything after a
  // recovery emptied the caches) with what is left.
  for (size_t k = 0; k < n && budget > 0 && pieces.size() < most; ++k) {
    Active& a = *candidates[(m_decodeStart + k) % n];
    if (a.unread() != 1 || pieceEnd(a) != a.tokens.size()) continue;
    // Budget left after one row for each decoding sequence still to come.
    const bool byModel =
        draftFor(a, budget - static_cast<int32_t>(n - k), m_draft, m_pieceDraftSeconds);
    const auto d = static_cast<int32_t>(m_draft.size());
    a.tokens.insert(a.tokens.end(), m_draft.begin(), m_draft.end());
    pieces.push_back({&a, 1 + d, true, d, byModel});
    budget -= 1 + d;
  }
  m_decodeStart = n ? (m_decodeStart + 1) % n : 0;
  // Each reading sequence's piece whole or not at all this step, so that its shape never depends
  // on what else is in the batch.
  for (size_t i = 0; i < n && budget > 0 && pieces.size() < most; ++i) {
    Active& a = *candidates[i];
    const size_t end = pieceEnd(a);
    const auto count = static_cast<int32_t>(end - a.computed);
    if (a.unread() == 1 && end == a.tokens.size()) continue;  // decoding: above
    if (std::any_of(pieces.begin(), pieces.end(),
                    [&a](const Piece& p) { return p.member == &a; })) {
      continue;  // decoding with a draft: above
    }
    if (count > budget) continue;
    pieces.push_back({&a, count, end == a.tokens.size()});
    budget -= count;
  }
}

void Scheduler::addPiece(Group& g, const Piece& p) {
  const Active& a = *p.member;
  const auto from = a.tokens.begin() + static_cast<ptrdiff_t>(a.computed);
  g.rows.insert(g.rows.end(), from, from + p.count);
  Segment seg{a.slot, static_cast<int32_t>(a.computed), p.count,
              p.logits ? LogitRows::Last : LogitRows::None};
  if (p.drafted > 0) {  // verifying: every row's token, each row as if decoded alone
    seg.logits = LogitRows::All;
    seg.decodeOrder = true;
  }
  g.segments.push_back(seg);
  g.members.push_back(p.member);
  g.drafted.push_back(p.drafted);
  g.byModel.push_back(p.byModel ? 1 : 0);
}

void Scheduler::drawAt(Active& a, size_t position) {
  const SamplerParams& p = a.request.options.sampler;
  if (drawsByPosition(p)) a.sampler.reseed(p.seed + position);
}

Batch Scheduler::batchOf(Group& g) {
  // A head that samples (a pool's last node, a GPU stage) answers with tokens, so the logits need
  // not cross the network or the bus; it has no history for a repetition penalty. One request
  // serves the batch: greedy for any number of rows, a sampled one for a single row (its seed is
  // its position's).
  bool greedy = true, eachByPosition = true;
  size_t logitSegments = 0, sampled = 0;
  for (size_t k = 0; k < g.segments.size(); ++k) {
    if (g.segments[k].logits == LogitRows::None) continue;
    ++logitSegments;
    const SamplerParams& sp = g.members[k]->request.options.sampler;
    const bool rowGreedy = sp.temperature <= 0 && sp.repeatPenalty == 1;
    if (!rowGreedy) greedy = false;
    if (g.segments[k].logits == LogitRows::Last && drawsByPosition(sp)) {
      sampled = k + 1;
    } else if (!(rowGreedy && g.segments[k].logits == LogitRows::All)) {
      eachByPosition = false;
    }
  }
  Batch b;
  b.tokens = g.rows;
  b.segments = g.segments;
  if (greedy) {
    g.sample = SampleRequest{};
    b.sample = &g.sample;
  } else if (logitSegments == 1 && sampled > 0) {
    const Segment& s = g.segments[sampled - 1];
    g.sample = sampleRequestAt(g.members[sampled - 1]->request.options.sampler,
                               static_cast<uint64_t>(s.firstPosition + s.count));
    b.sample = &g.sample;
  } else if (eachByPosition) {
    // Several sequences, each drawn by position (greedy ones too: a greedy request's draw is
    // the argmax); a stage that cannot take a request per segment returns the logits.
    g.samples.assign(g.segments.size(), SampleRequest{});
    for (size_t k = 0; k < g.segments.size(); ++k) {
      const Segment& s = g.segments[k];
      if (s.logits == LogitRows::None) continue;
      g.samples[k] = sampleRequestAt(g.members[k]->request.options.sampler,
                                     static_cast<uint64_t>(s.firstPosition + s.count));
    }
    b.samples = g.samples;
  }
  return b;
}

void Scheduler::undoDrafts(const Group& g) {
  for (size_t k = 0; k < g.members.size(); ++k) {
    Active& a = *g.members[k];
    a.tokens.resize(a.tokens.size() - static_cast<size_t>(g.drafted[k]));
  }
}

Scheduler::Learned Scheduler::consume(Group& g, const StageOutput& out) {
  Learned learned;
  learned.modelSeconds = g.draftSeconds;
  for (size_t k = 0; k < g.members.size(); ++k) {
    if (g.members[k]->request.options.lookup.maxDraft > 0) learned.lookup = true;
  }
  size_t logitRows = 0;
  for (const Segment& seg : g.segments) {
    logitRows += seg.logits == LogitRows::All    ? static_cast<size_t>(seg.count)
                 : seg.logits == LogitRows::Last ? 1
                                                 : 0;
  }
  const bool sampled = !out.tokens.empty();
  if (logitRows > 0 && (sampled ? out.tokens.size() != logitRows
                                : out.logits.empty() || out.logits.size() % logitRows != 0)) {
    undoDrafts(g);
    failBatch(g.members, "the head stage returned " + std::to_string(out.tokens.size()) +
                             " tokens and " + std::to_string(out.logits.size()) + " logits for " +
                             std::to_string(logitRows) + " rows");
    return learned;
  }
  const size_t vocab = logitRows && !sampled ? out.logits.size() / logitRows : 0;
  size_t row = 0;
  for (size_t k = 0; k < g.segments.size(); ++k) {
    Active& a = *g.members[k];
    if (g.segments[k].decodeOrder) {
      // A verifying segment: the token after each row, then what of the draft holds.
      const auto rows = static_cast<size_t>(g.segments[k].count);
      const size_t firstDraft = a.computed + 1;
      m_predicted.clear();
      bool bad = false;
      for (size_t r = 0; r < rows; ++r) {
        const std::span<const float> logits =
            sampled ? std::span<const float>()
                    : std::span<const float>(out.logits.data() + (row + r) * vocab, vocab);
        model::TokenId t = sampled ? out.tokens[row + r] : -1;
        drawAt(a, firstDraft + r);
        if (!sampled && a.request.options.sampler.temperature > 0 && r + 1 < rows) {
          bool kept = false;
          t = a.sampler.sampleDraft(logits, a.tokens[firstDraft + r], kept);
          m_predicted.push_back(t);
          if (!kept) break;
          continue;
        }
        if (!sampled) t = a.sampler.sample(logits);
        if (t < 0 || t >= m_tokenizer.size()) bad = true;
        m_predicted.push_back(t);
      }
      row += rows;
      if (bad) {
        a.tokens.resize(firstDraft);
        failBatch({&a}, "the head stage sampled an unknown token");
        continue;
      }
      const bool byModel = g.byModel[k] != 0;
      acceptVerified(a, rows - 1, m_predicted, byModel);
      (byModel ? learned.modelDrafted : learned.drafted) += g.drafted[k];
      (byModel ? learned.modelAccepted : learned.accepted) += a.lastAccepted;
      continue;
    }
    a.starts.push_back(a.computed);
    a.computed += static_cast<size_t>(g.segments[k].count);
    if (g.segments[k].logits != LogitRows::Last) continue;
    model::TokenId next;
    if (sampled) {
      next = out.tokens[row];
      if (next < 0 || next >= m_tokenizer.size()) {
        failBatch({&a}, "the head stage sampled an unknown token");
        ++row;
        continue;
      }
    } else {
      drawAt(a, a.computed);  // the last row predicts the position after it
      next = a.sampler.sample(std::span<const float>(out.logits.data() + row * vocab, vocab));
    }
    ++row;
    accept(a, next);
  }
  return learned;
}

void Scheduler::learn(const Learned& l, double seconds) {
  if (l.drafted > 0) m_draftPolicy.verifyStep(l.drafted, l.accepted, seconds);
  // The model's drafts cost their making too (as in Session).
  if (l.modelDrafted > 0) {
    m_modelPolicy.verifyStep(l.modelDrafted, l.modelAccepted, seconds + l.modelSeconds);
  }
  if (l.drafted == 0 && l.modelDrafted == 0 && l.lookup) {
    m_draftPolicy.plainStep(seconds);
    if (m_drafter) m_modelPolicy.plainStep(seconds);
  }
}

bool Scheduler::step() {
  finishCancelled();
  const size_t depth = m_chain.asyncDepth();
  if (depth > 0) return pipelinedStep(depth);
  admit();
  if (m_active.empty()) return false;
  if (Active* a = aheadCandidate()) return aheadStep(*a);
  return wavefrontStep();
}

Scheduler::Active* Scheduler::aheadCandidate() {
  if (m_active.size() != 1 || !m_waiting.empty() || m_chain.decodeAheadLimit() < 2) {
    return nullptr;
  }
  Active& a = *m_active.front();
  const GenerateOptions& o = a.request.options;
  // The chain draws each token as this would (drawsByPosition); a repetition penalty needs the
  // history, which only this has.
  if (a.done || a.unread() != 1 || a.result.tokens.empty() || !a.replayEnds.empty() ||
      o.decodeAhead < 2 || !drawsByPosition(o.sampler)) {
    return nullptr;
  }
  // A draft to verify yields several tokens per round trip as well, and maybe more.
  if (m_drafter && o.lookup.maxDraft > 0) return nullptr;
  if (o.lookup.maxDraft > 0) {
    draftByPromptLookup(a.tokens, o.lookup, std::min(o.lookup.maxDraft, m_chain.maxBatch() - 1),
                        m_draft);
    if (!m_draft.empty()) return nullptr;
  }
  return &a;
}

bool Scheduler::aheadStep(Active& a) {
  const GenerateOptions& o = a.request.options;
  const auto left =
      static_cast<int32_t>(o.maxTokens - static_cast<int32_t>(a.result.tokens.size()));
  const auto room = static_cast<int32_t>(m_contextLength - static_cast<int32_t>(a.computed));
  const int32_t count = fitDecodeAheadBurst(nextDecodeAheadBurst(a.ahead, m_aheadSecondsPerToken),
                                            std::min(left, room),
                                            std::min(o.decodeAhead, m_chain.decodeAheadLimit()));
  if (count < 2) return wavefrontStep();
  a.ahead = count;
  // The token fed sits at `computed`; the first one decoded at the position after it.
  const SampleRequest sample = sampleRequestAt(o.sampler, a.computed + 1);
  const auto t0 = Clock::now();
  std::vector<model::TokenId> decoded;
  try {
    decoded = m_chain.decodeAhead(a.slot, static_cast<int32_t>(a.computed), a.tokens.back(), count,
                                  sample);
    if (decoded.size() != static_cast<size_t>(count)) {
      throw Error("the chain decoded " + std::to_string(decoded.size()) + " tokens ahead, not " +
                  std::to_string(count));
    }
  } catch (const std::exception& e) {
    ++m_stats.steps;
    recoverOrFail(e, {&a});
    std::erase_if(m_active, [](const auto& x) { return x->done; });
    return true;
  }
  const double seconds = secondsBetween(t0, Clock::now());
  m_aheadSecondsPerToken = m_aheadSecondsPerToken > 0
                               ? 0.5 * (m_aheadSecondsPerToken + seconds / count)
                               : seconds / count;
  ++m_stats.steps;
  m_stats.rowsRun += static_cast<uint64_t>(count);
  ++a.result.aheadSteps;
  a.result.aheadTokens += count;
  for (model::TokenId t : decoded) {
    if (t < 0 || t >= m_tokenizer.size()) {
      failBatch({&a}, "the head stage sampled an unknown token");
      break;
    }
    // The row that predicted t (the token fed at `computed`) is cached now: a one-row piece.
    a.starts.push_back(a.computed);
    ++a.computed;
    if (accept(a, t)) break;
  }
  std::erase_if(m_active, [](const auto& x) { return x->done; });
  return true;
}

bool Scheduler::wavefrontStep() {
  m_ready.clear();
  for (auto& a : m_active) m_ready.push_back(a.get());
  collectPieces(m_ready, m_ready.size(), m_pieces);

  // On a chain of several stages the pieces go into as many batches as the chain's pipeline
  // depth, in flight at once (every stage busy on a different group).
  const size_t groups = std::max<size_t>(1, std::min(m_chain.pipelineDepth(), m_pieces.size()));
  m_groups.resize(groups);
  for (Group& g : m_groups) {
    g.rows.clear();
    g.segments.clear();
    g.members.clear();
    g.drafted.clear();
    g.byModel.clear();
    g.draftSeconds = 0;
  }
  for (size_t k = 0; k < m_pieces.size(); ++k) addPiece(m_groups[k % groups], m_pieces[k]);
  m_groups.front().draftSeconds = m_pieceDraftSeconds;  // the step's: learned once
  std::vector<Batch> batches;
  std::vector<Active*> members;
  for (Group& g : m_groups) {
    batches.push_back(batchOf(g));
    members.insert(members.end(), g.members.begin(), g.members.end());
  }
  m_outs.resize(groups);
  const auto t0 = Clock::now();
  try {
    m_chain.forwardBatches(batches, m_outs);
  } catch (const std::exception& e) {
    ++m_stats.steps;
    for (const Group& g : m_groups) undoDrafts(g);
    recoverOrFail(e, members);
    std::erase_if(m_active, [](const auto& a) { return a->done; });
    return true;
  }
  const double seconds = secondsBetween(t0, Clock::now());
  ++m_stats.steps;
  Learned step;
  for (size_t gi = 0; gi < groups; ++gi) {
    m_stats.rowsRun += m_groups[gi].rows.size();
    const Learned l = consume(m_groups[gi], m_outs[gi]);
    step.drafted += l.drafted;
    step.accepted += l.accepted;
    step.lookup = step.lookup || l.lookup;
  }
  learn(step, seconds);
  std::erase_if(m_active, [](const auto& a) { return a->done; });
  return true;
}

bool Scheduler::pipelinedStep(size_t depth) {
  if (m_inFlight.empty()) {
    admit();
    if (m_active.empty()) return false;
  }
  // A waiting request that a free slot could take: let the pipeline drain (admit() above).
  const bool admissionDue =
      !m_waiting.empty() &&
      std::any_of(m_slots.begin(), m_slots.end(), [](const Slot& s) { return !s.busy; });
  if (m_inFlight.size() < depth && !(admissionDue && !m_inFlight.empty())) {
    m_ready.clear();
    for (auto& a : m_active) {
      if (!a->inFlight && !a->done) m_ready.push_back(a.get());
    }
    if (!m_ready.empty()) {
      // An equal share of the sequences not in flight per batch still to fill the pipeline: with
      // S sequences and depth D, groups of about S / D that keep going round.
      const size_t open = depth - m_inFlight.size();
      collectPieces(m_ready, (m_ready.size() + open - 1) / open, m_pieces);
      if (!m_pieces.empty()) {
        Group& g = m_inFlight.emplace_back();
        for (const Piece& p : m_pieces) {
          addPiece(g, p);
          p.member->inFlight = true;
        }
        g.draftSeconds = m_pieceDraftSeconds;
        g.submitted = Clock::now();
        try {
          g.ticket = m_chain.submit(batchOf(g), g.out);
        } catch (const std::exception& e) {
          abandonInFlight(e);
        }
        return true;
      }
    }
  }
  if (m_inFlight.empty()) {
    // Nothing could be formed (cannot happen while chunks fit the budget): end those
    // generations rather than spin.
    failBatch(m_ready, "scheduler: no piece fits the token budget");
    std::erase_if(m_active, [](const auto& a) { return a->done; });
    return true;
  }
  completeOldest();
  return true;
}

void Scheduler::completeOldest() {
  Group& g = m_inFlight.front();
  try {
    m_chain.wait(g.ticket);
  } catch (const std::exception& e) {
    abandonInFlight(e);
    return;
  }
  const double seconds = secondsBetween(g.submitted, Clock::now());
  ++m_stats.steps;
  m_stats.rowsRun += g.rows.size();
  for (Active* a : g.members) a->inFlight = false;
  learn(consume(g, g.out), seconds);
  m_inFlight.pop_front();
  std::erase_if(m_active, [](const auto& a) { return a->done; });
}

void Scheduler::abandonInFlight(const std::exception& error) {
  // The stage forgot every batch in flight when it threw (Stage: a failure abandons them).
  std::vector<Active*> members;
  for (const Group& g : m_inFlight) {
    undoDrafts(g);
    for (Active* a : g.members) a->inFlight = false;
    members.insert(members.end(), g.members.begin(), g.members.end());
  }
  m_inFlight.clear();
  ++m_stats.steps;
  recoverOrFail(error, members);
  std::erase_if(m_active, [](const auto& a) { return a->done; });
}

void Scheduler::drainInFlight() {
  while (!m_inFlight.empty()) {
    try {
      m_chain.wait(m_inFlight.front().ticket);
    } catch (const std::exception&) {
      break;  // the stage abandoned the rest
    }
    undoDrafts(m_inFlight.front());
    m_inFlight.pop_front();
  }
  for (const Group& g : m_inFlight) undoDrafts(g);
  m_inFlight.clear();
  for (auto& a : m_active) a->inFlight = false;
}

bool Scheduler::draftFor(const Active& a, int32_t budget, std::vector<model::TokenId>& draft,
                         double& modelSeconds) {
  draft.clear();
  const GenerateOptions& o = a.request.options;
  // As Session: without a repetition penalty, each row's distribution depends on the tokens
  // before it only.
  if (o.lookup.maxDraft <= 0 || o.sampler.repeatPenalty != 1.0f) return false;
  const auto room = std::min<int64_t>(
      {int64_t{budget}, int64_t{o.maxTokens} - static_cast<int64_t>(a.result.tokens.size()) - 1,
       int64_t{m_contextLength} - 1 - static_cast<int64_t>(a.tokens.size())});
  if (room <= 0) return false;
  draftByPromptLookup(a.tokens, o.lookup, static_cast<int32_t>(room), draft);
  if (o.lookup.adaptive) {
    draft.resize(static_cast<size_t>(m_draftPolicy.length(static_cast<int32_t>(draft.size()))));
  }
  if (!draft.empty() || !m_drafter) return false;
  // A draft model's tokens cost time to make: its policy sizes them before they are made.
  const auto most = static_cast<int32_t>(std::min<int64_t>(room, o.lookup.maxDraft));
  const int32_t want = o.lookup.adaptive ? m_modelPolicy.length(most) : most;
  if (want <= 0) return false;
  const auto t0 = Clock::now();
  const double prefill = m_drafter->propose(a.slot, a.tokens, want, draft);
  modelSeconds += secondsBetween(t0, Clock::now()) - prefill;
  return !draft.empty();
}

void Scheduler::acceptVerified(Active& a, size_t drafted,
                               const std::vector<model::TokenId>& predicted, bool byModel) {
  // predicted[j] follows row j; drafted token j stands at position computed + 1 + j.
  const size_t base = a.computed, firstDraft = base + 1;
  size_t kept = 0;
  while (kept < drafted && kept + 1 < predicted.size() &&
         predicted[kept] == a.tokens[firstDraft + kept]) {
    ++kept;
  }
  const std::vector<model::TokenId> confirmed(
      a.tokens.begin() + static_cast<ptrdiff_t>(firstDraft),
      a.tokens.begin() + static_cast<ptrdiff_t>(firstDraft + kept));
  ++a.result.verifySteps;
  a.result.draftedTokens += static_cast<int32_t>(drafted);
  a.result.acceptedTokens += static_cast<int32_t>(kept);
  if (byModel) {
    a.result.modelDraftedTokens += static_cast<int32_t>(drafted);
    a.result.modelAcceptedTokens += static_cast<int32_t>(kept);
  }
  a.lastAccepted = static_cast<int32_t>(kept);
  // The rows are kept as one-row pieces (decode order made each equal to one), so a replay
  // reproduces them; the rejected rows' cache entries are overwritten later.
  a.tokens.resize(firstDraft);
  a.starts.push_back(base);
  a.computed = firstDraft;
  for (model::TokenId t : confirmed) {
    if (accept(a, t)) return;  // pushed it to a.tokens unless it ended the generation
    a.starts.push_back(a.computed);
    ++a.computed;  // its row was computed in this step
  }
  accept(a, predicted[kept]);
}

void Scheduler::replayEverything() {
  // Every slot of the repaired chain is empty: each generation reads its tokens again (prompt
  // and reply so far) in its original pieces in the next steps, and continues where it was.
  for (auto& a : m_active) {
    a->replayEnds.assign(a->starts.begin() + (a->starts.empty() ? 0 : 1), a->starts.end());
    if (a->computed > 0) a->replayEnds.push_back(a->computed);
    a->starts.clear();
    a->computed = 0;
    ++a->result.recoveries;
  }
  for (Slot& slot : m_slots) {
    slot.cached.clear();
    slot.starts.clear();
  }
}

void Scheduler::recoverOrFail(const std::exception& error, const std::vector<Active*>& members) {
  if (m_recovery) {
    try {
      if (m_recovery(error, m_chain.failedStage())) {
        replayEverything();
        return;
      }
    } catch (const std::exception& again) {
      failBatch(members, again.what());
      return;
    }
  }
  failBatch(members, error.what());
}

void Scheduler::runUntilIdle() {
  while (step()) {
  }
}

}  // namespace shoal::runtime
