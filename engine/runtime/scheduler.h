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
// else shares the batch — the CPU backend picks each segment's dot order from that segment's own
// rows (kernels/cpu/cpu_layer_ops.h RowRun) and attends per sequence over its own slot — and a
// prompt is always cut into the same pieces: chunks of exactly min(rest, chunk) rows from where
// its cache ends, a chunk waiting for the next step rather than being cut to fit. So on the CPU
// backend a reply equals, byte for byte, the same request run alone, and Session::generate's reply
// when the prompt fits one chunk (tests/unit/runtime/test_scheduler.cpp). A recovery replays
// each sequence in its original pieces.
//
// Over a chain of several stages (a pool) the sequences are split into as many groups as the
// chain's pipeline depth, each its own batch, so every node works on a different group:
//  - a pool whose nodes forward to each other directly (Chain::asyncDepth() > 0) keeps the groups
//    in flight continuously: each step() either submits the next batch of the sequences that are
//    not in flight (about an equal share of them, while fewer than depth batches are out) or
//    waits for the oldest batch and takes its tokens, so a group goes round again as soon as it
//    is back and the pipeline never drains. A request waiting for a free slot is admitted once
//    nothing is in flight (admission truncates a slot, which abandons batches in flight on
//    remote stages), so each admission drains the pipeline once;
//  - any other chain of several stages runs a step's groups as one wavefront
//    (Chain::forwardBatches), which drains at the end of every step.
// A head stage that samples answers a batch of greedy rows with tokens; rows of sampled
// sequences bring their logits back (the sampler runs here, per sequence). Recovery from a failed
// stage: SchedulerOptions::recovery (every batch in flight is abandoned first). A sequence's
// pieces do not depend on how sequences are grouped, so batch invariance holds in both modes.
//
// Speculative decoding (GenerateOptions::lookup, as Session has it): a decoding sequence whose
// history offers a prompt-lookup draft — or, where it offers none, a draft model's
// (SchedulerOptions::drafter, in the sequence's own slot of the draft model's chain) — runs its
// last token plus the draft as one segment in decode order (Segment::decodeOrder), so each row
// is what decoding it alone gives; the confirmed drafts and the next token are accepted one by
// one through the same finish rules, and the kept rows are recorded as one-row pieces, which a
// replay reproduces bit for bit. A DraftPolicy per kind of draft sizes them from what this
// scheduler's steps cost and earn (a draft model's time making its drafts counted too).
//
// Threading: one thread calls everything (the API's worker); the callbacks run on it, inside
// step() and cancelAll(), and may call cancel() but not add(). A cancelled sequence whose batch
// is in flight ends when that batch is back.

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
#include "engine/runtime/draft_policy.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/reply_text.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/session.h"

namespace shoal::runtime {

struct SchedulerOptions {
  // Most rows one step may carry, decode and prefill together; 0: the chain's maxBatch. It must
  // exceed the slots. Decode rows come first; a prompt is read in chunks of (budget - slots + 1)
  // rows, so a long prompt slows the replies under way by at most one chunk per token.
  int32_t tokenBudget = 0;
  // Called when a step throws, with the error and the index of the stage that threw last
  // (Chain::failedStage), as Session's hook: return true once the chain is repaired and every
  // stage's cache of every slot is empty (the pool coordinator re-plans without a lost node);
  // each generation then reads its prompt and reply so far again and continues — a greedy
  // reply is unchanged. False, a throw, or no hook: the step's generations end with the error.
  std::function<bool(const std::exception& error, size_t failedStage)> recovery;
  // A draft model (ModelDrafter) that proposes tokens for sequences prompt lookup has nothing
  // for (speculative decoding, GenerateOptions::lookup), or nullptr. Its chain must hold at
  // least as many KV slots as this scheduler uses: slot i drafts for the sequence in slot i. Its
  // drafts have their own DraftPolicy (a draft model's tokens cost time to make). Not owned.
  ModelDrafter* drafter = nullptr;
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
  using Recovery = std::function<bool(const std::exception& error, size_t failedStage)>;

  struct Request {
    std::vector<model::TokenId> prompt;
    GenerateOptions options;  // options.cancel is checked before every step
    TextCallback onText;
    FinishCallback onFinish;
  };

  // The chain's stages must all hold at least one KV slot; the scheduler uses as many as the
  // stage with the fewest holds. The chain and tokenizer must outlive the scheduler.
  Scheduler(Chain& chain, const model::Tokenizer& tokenizer, SchedulerOptions options = {});
  // Waits for the batches still in flight (their outputs live here).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a generation. Throws shoal::Error for a request that can never run (empty prompt, ids
  // outside the vocabulary, a prompt that does not fit the context) before taking a place.
  Id add(Request request);
  // Ends a generation (queued or running) as Cancelled at the next step. Unknown ids are ignored.
  void cancel(Id id);
  // Ends every generation, queued and running, as Cancelled now (the callbacks run).
  void cancelAll();

  // Runs one batch (on a chain that pipelines on its own: submits one, or completes the oldest
  // in flight); false when there was nothing to run (no request left).
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
    // Where each computed piece (a prompt chunk, a decode row) began: a replay after a recovery
    // repeats those pieces exactly (the same segment shapes give the same bits). replayEnds:
    // during such a replay, where the original pieces ended.
    std::vector<size_t> starts;
    std::vector<size_t> replayEnds;
    int32_t lastAccepted = 0;   // drafts its last verifying step confirmed
    int32_t ahead = 0;          // tokens its last decode-ahead burst asked for (aheadStep)
    bool inFlight = false;      // a batch with its next piece is in flight (pipelined steps)
    bool cancelled = false;     // cancel() was called
    bool done = false;          // finished: the step removes it
    Clock::time_point started;  // admission: prefill time counts from here
    Clock::time_point firstToken;

    Active(Id id_, int32_t slot_, Request r, const model::Tokenizer& tok);
    // Tokens still to run: 1 while decoding, more while reading the prompt (or replaying it and
    // the reply after a recovery).
    size_t unread() const { return tokens.size() - computed; }
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
    std::vector<size_t> starts;  // the pieces `cached` was computed in (Active::starts)
    uint64_t lastUsed = 0;  // step it was last freed: among equal prefixes the oldest is reused
  };

  // A piece of a step: the rows one sequence runs.
  struct Piece {
    Active* member = nullptr;
    int32_t count = 0;
    bool logits = false;   // the piece ends what the sequence had to read: sample from its last row
    int32_t drafted = 0;   // a decoding piece's drafted tokens (its rows after the first)
    bool byModel = false;  // drafted by the draft model (else by prompt lookup)
  };
  // One batch: the pieces of some sequences. Pipelined steps keep it, with its output, until
  // it is back.
  struct Group {
    std::vector<int32_t> rows;
    std::vector<Segment> segments;
    std::vector<Active*> members;        // of each segment
    std::vector<int32_t> drafted;        // of each segment
    std::vector<char> byModel;           // of each segment: its draft came from the draft model
    double draftSeconds = 0;             // the draft model's time making this batch's drafts
    SampleRequest sample;                // batchOf's sampled request (Batch::sample points here)
    std::vector<SampleRequest> samples;  // batchOf's per-segment requests (Batch::samples)
    StageOutput out;
    Stage::Ticket ticket = 0;
    Clock::time_point submitted;
  };
  // What one group's outcome teaches the draft policy.
  struct Learned {
    int32_t drafted = 0;  // by prompt lookup
    int32_t accepted = 0;
    int32_t modelDrafted = 0;  // by the draft model
    int32_t modelAccepted = 0;
    double modelSeconds = 0;  // making the model's drafts
    bool lookup = false;      // a member asked for speculation
  };

  void admit();
  // Ends the generations cancelled since the last step (those not in flight).
  void finishCancelled();
  // Where the next piece of `a` ends: its original piece's end while replaying; otherwise one
  // row while decoding, a chunk of at most m_chunk rows while reading.
  size_t pieceEnd(const Active& a) const;
  // The pieces of at most `most` of `candidates` (in admission order) under the token budget:
  // one row (plus a draft) per decoding sequence, rotating who goes first, then whole chunks of
  // those reading.
  void collectPieces(const std::vector<Active*>& candidates, size_t most,
                     std::vector<Piece>& pieces);
  static void addPiece(Group& g, const Piece& p);
  // The group's batch; it asks the head to sample when every logits row is greedy, when the one
  // logits row is drawn by position (drawsByPosition: the head draws what this would), or with a
  // request per segment when each segment's last row is greedy or drawn by position.
  static Batch batchOf(Group& g);
  // Takes a group's head output: accepts each member's tokens (or fails the members when the
  // output is malformed).
  Learned consume(Group& g, const StageOutput& out);
  void learn(const Learned& l, double seconds);
  // A step's drafts were never computed: each verifying sequence decodes its last token again.
  static void undoDrafts(const Group& g);
  // Runs a step's groups as one wavefront (any chain but one that pipelines on its own).
  bool wavefrontStep();
  // Decoding ahead (Chain::decodeAhead, a chain of one far node holding the whole model): the
  // one generation to run this step when it alone is active and nothing waits, it draws by
  // position (no penalty: drawsByPosition) and has no draft to verify; else nullptr.
  Active* aheadCandidate();
  // One burst for it: the node decodes several tokens, each accepted as a decoded row would be
  // (one-row pieces: a replay repeats them exactly); the burst grows 2, 4, 8, ... up to about
  // kDecodeAheadBurstSeconds at the measured pace, as Session's.
  bool aheadStep(Active& a);
  // Submits a group or completes the oldest in flight (Chain::asyncDepth() = depth > 0).
  bool pipelinedStep(size_t depth);
  void completeOldest();
  // A submit or wait threw: every batch in flight is abandoned, then recoverOrFail.
  void abandonInFlight(const std::exception& error);
  // Waits for every batch in flight, discarding what comes back (cancelAll, destruction).
  void drainInFlight();
  void finishWaiting(Waiting& w);  // a queued request ends as Cancelled
  // Feeds a sampled token to its generation; returns true when the generation has ended.
  bool accept(Active& a, model::TokenId token);
  // Before a's sampler draws the token at `position`: re-seeded to its position's seed where
  // the generation draws by position (drawsByPosition), as a head stage or a node would draw.
  static void drawAt(Active& a, size_t position);
  // Drafted tokens `a` should verify this step, within `budget` more rows (none: decode one):
  // prompt lookup's, else the draft model's (then true, with the seconds it spent drafting,
  // a new prompt's prefill left out, added to `modelSeconds`).
  bool draftFor(const Active& a, int32_t budget, std::vector<model::TokenId>& draft,
                double& modelSeconds);
  // The outcome of a verifying segment of `a` (its last token plus `drafted` tokens at the end of
  // a.tokens): `predicted` holds the token after each row (a sampled verification stops at its
  // first rejected draft). Keeps the confirmed drafts, accepts them and the next token.
  void acceptVerified(Active& a, size_t drafted, const std::vector<model::TokenId>& predicted,
                      bool byModel);
  void finish(Active& a, FinishReason reason);
  void release(Active& a);  // frees the slot, remembering what it caches
  void failBatch(const std::vector<Active*>& members, const std::string& error);
  // After a recovery emptied every cache: each active generation replays its pieces.
  void replayEverything();
  // A step threw: recovery (SchedulerOptions::recovery) or failBatch of its members.
  void recoverOrFail(const std::exception& error, const std::vector<Active*>& members);

  Chain& m_chain;
  const model::Tokenizer& m_tokenizer;
  int32_t m_contextLength = 0;
  int32_t m_budget = 0;
  size_t m_chunk = 0;  // prompt rows per piece: the budget less one decode row per other slot
  std::vector<Slot> m_slots;
  std::deque<Waiting> m_waiting;
  std::vector<std::unique_ptr<Active>> m_active;  // in admission order
  Id m_nextId = 1;
  size_t m_decodeStart = 0;  // rotates which decoding sequences go first when over budget
  SchedulerStats m_stats;
  DraftPolicy m_draftPolicy;  // prompt lookup's, learns from this scheduler's steps
  ModelDrafter* m_drafter = nullptr;
  DraftPolicy m_modelPolicy{1};       // the draft model's (its probes draft one token)
  double m_pieceDraftSeconds = 0;     // collectPieces: the draft model's time for the pieces
  double m_aheadSecondsPerToken = 0;  // measured by aheadStep (sizes its bursts)

  Recovery m_recovery;
  std::deque<Group>
      m_inFlight;  // pipelined steps' batches, oldest first (a deque: outputs stay put)
  // Scratch reused by every step.
  std::vector<Group> m_groups;  // a wavefront's
  std::vector<StageOutput> m_outs;
  std::vector<Piece> m_pieces;
  std::vector<Active*> m_ready;
  std::vector<model::TokenId> m_draft, m_predicted;
};

}  // namespace shoal::runtime
