#pragma once
// Continuous batching: many generations over one chain at once. Each step() forms one batch from
// the next token of every sequence that is decoding plus chunks of the prompts still being read
// (chunked prefill under a token budget), runs it through the chain once — so the weights are
// read once for every sequence in it — and samples each sequence's next token from its own row.
// A finished or cancelled generation frees its KV slot at once and the next request waiting for
// one takes it in the same step.
//
// Slots: a chain holds maxSequences KV slots of contextLength positions (the stages' StageSpec:
// that is the memory budget, allocated when the stages are made). A request takes a free slot or
// waits, first come first served; nothing is ever allocated per request. A slot keeps what its
// last generation cached, and a new request goes to the free slot that shares the longest prefix
// with its prompt (a common system prompt, the previous turn of a chat), so that prefix is not
// computed again.
//
// Batch invariance: a sequence's rows are computed by the same kernels in the same order whatever
// else shares the batch (the CPU backend's matmul computes each (row, token) dot alone and
// attention runs per sequence over its own slot), so on the CPU backend a greedy reply equals the
// one Session::generate produces alone, byte for byte (tests/unit/runtime/test_scheduler.cpp).
//
// What a Session does and this does not (yet): recovery from a failed stage (a failed step ends
// every generation that was in its batch with the error and clears their slots) and sampling on
// a remote head (logits of every sampled row come back to the caller's machine).
//
// Threading: one thread calls everything (the API's worker); the callbacks run on it, inside
// step() and cancelAll(), and may call cancel() but not add().

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/reply_text.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/session.h"

namespace shoal::runtime {

struct SchedulerOptions {
  // Most rows one step may carry, decode and prefill together; 0: the chain's maxBatch. Decode
  // rows come first, so a long prompt slows the replies under way by at most one budget's worth
  // of prefill per token.
  int32_t tokenBudget = 0;
};

struct SchedulerStats {
  size_t waiting = 0;      // requests queued for a slot
  size_t active = 0;       // requests holding a slot (reading their prompt or generating)
  size_t slotCount = 0;    // KV slots of the chain
  uint64_t steps = 0;      // batches run
  uint64_t rowsRun = 0;    // rows those batches carried
  uint64_t completed = 0;  // generations that ended with a finish reason other than Cancelled
  uint64_t cancelled = 0;
  uint64_t failed = 0;  // ended by an error
};

class Scheduler {
 public:
  using Id = uint64_t;
  // Called with each piece of the reply as it becomes final (whole UTF-8 characters, stop strings
  // held back: engine/runtime/reply_text.h); return false to stop the generation (Cancelled).
  using TextCallback = std::function<bool(std::string_view piece)>;
  // Called once at the end; `error` is empty unless the generation failed.
  using FinishCallback = std::function<void(const GenerateResult& result, std::string_view error)>;

  struct Request {
    std::vector<model::TokenId> prompt;
    GenerateOptions options;  // options.cancel is checked before every step
    TextCallback onText;
    FinishCallback onFinish;
  };

  // The chain's stages must all hold at least one KV slot; the scheduler uses as many as the
  // stage with the fewest holds. The chain and tokenizer must outlive the scheduler.
  Scheduler(Chain& chain, const model::Tokenizer& tokenizer, SchedulerOptions options = {});

  // Queues a generation. Throws shoal::Error for a request that can never run (empty prompt, ids
  // outside the vocabulary, a prompt that does not fit the context) before taking a place.
  Id add(Request request);
  // Ends a generation (queued or running) as Cancelled at the next step. Unknown ids are ignored.
  void cancel(Id id);
  // Ends every generation, queued and running, as Cancelled now (the callbacks run).
  void cancelAll();

  // Runs one batch; false when there was nothing to run (no request left).
  bool step();
  // step() until every request has finished.
  void runUntilIdle();

  bool idle() const { return m_waiting.empty() && m_active.empty(); }
  SchedulerStats stats() const;
  int32_t contextLength() const { return m_contextLength; }
  size_t slotCount() const { return m_slots.size(); }

 private:
  using Clock = std::chrono::steady_clock;

  // A generation that holds a slot.
  struct Active {
    Id id = 0;
    int32_t slot = 0;
    Request request;
    Sampler sampler;
    ReplyText text;
    GenerateResult result;
    // Tokens whose keys/values are (or are being) written to the slot: the prompt, then each
    // generated token once it is fed back. computed counts those already run.
    std::vector<model::TokenId> tokens;
    size_t computed = 0;
    bool cancelled = false;     // cancel() was called
    bool done = false;          // finished: the step removes it
    Clock::time_point started;  // admission: prefill time counts from here
    Clock::time_point firstToken;

    Active(Id id_, int32_t slot_, Request r, const model::Tokenizer& tok);
    bool readingPrompt() const { return computed < request.prompt.size(); }
  };
  struct Waiting {
    Id id = 0;
    Request request;
    bool cancelled = false;
  };
  // What one KV slot holds between generations (for prefix reuse).
  struct Slot {
    bool busy = false;
    std::vector<model::TokenId> cached;
    uint64_t lastUsed = 0;  // step it was last freed: among equal prefixes the oldest is reused
  };

  void admit();
  void finishWaiting(Waiting& w);  // a queued request ends as Cancelled
  // Feeds a sampled token to its generation; returns true when the generation has ended.
  bool accept(Active& a, model::TokenId token);
  void finish(Active& a, FinishReason reason);
  void release(Active& a);  // frees the slot, remembering what it caches
  void failBatch(const std::vector<size_t>& members, const std::string& error);

  Chain& m_chain;
  const model::Tokenizer& m_tokenizer;
  int32_t m_contextLength = 0;
  int32_t m_budget = 0;
  std::vector<Slot> m_slots;
  std::deque<Waiting> m_waiting;
  std::vector<std::unique_ptr<Active>> m_active;  // in admission order
  Id m_nextId = 1;
  size_t m_decodeStart = 0;  // rotates which decoding sequences go first when over budget
  SchedulerStats m_stats;

  // Scratch reused by every step.
  std::vector<int32_t> m_rows;
  std::vector<Segment> m_segments;
  StageOutput m_out;
};

}  // namespace shoal::runtime
