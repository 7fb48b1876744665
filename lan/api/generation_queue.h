#pragma once
// One inference worker running a continuous-batching scheduler (engine/runtime/scheduler.h), and
// a bounded queue of generation jobs in front of it.
//
// Threading contract: the worker thread is the only one that touches the Scheduler (and so the
// chain and its KV cache). Producers — the API's HTTP threads, the desktop app's chat thread —
// submit a GenerationJob and then read what it produces through the job itself (pieces of text,
// then the result), so a slow client never stalls the worker and the worker never touches a
// socket. One queue per loaded model serves them all: one copy of the weights, one chain. A job is
// cancelled by its own flag (set by the HTTP thread when the client has gone); the scheduler checks
// it before every step and frees the job's KV slot at once.
//
// Fairness: as many jobs run at once as the chain has KV slots, each step one token for every
// running job; the rest wait first come, first served.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/scheduler.h"
#include "engine/runtime/session.h"

namespace shoal::api {

class GenerationJob {
 public:
  GenerationJob(std::vector<model::TokenId> prompt, runtime::GenerateOptions options);

  // What a reader gets from next(): more text, the end (result() is valid), or nothing yet.
  enum class Event { Text, Finished, Timeout };
  // Waits up to `timeout` for something new; with Event::Text, `text` holds every piece produced
  // since the last call (concatenated).
  Event next(std::string& text, std::chrono::milliseconds timeout);
  // Waits until the job is finished (no text is kept for a reader that never reads it).
  void waitFinished();
  // Ask the worker to stop this job (queued: it is skipped; running: stopped before the next
  // token). Safe from any thread, any number of times.
  void cancel() { m_cancel.store(true); }
  bool cancelled() const { return m_cancel.load(); }

  // After Finished: the session's result; `error` non-empty when generation threw.
  const runtime::GenerateResult& result() const { return m_result; }
  const std::string& error() const { return m_error; }

  // The side that runs the job (a JobSink: GenerationQueue's worker, a test's scripted sink).
  const std::vector<model::TokenId>& prompt() const { return m_prompt; }
  const runtime::GenerateOptions& options() const { return m_options; }
  void push(std::string_view piece);  // more of the reply's text for the reader
  // The end: wakes the reader; `error` non-empty when generation threw.
  void finish(runtime::GenerateResult result, std::string error);

 private:
  friend class GenerationQueue;

  const std::vector<model::TokenId> m_prompt;
  runtime::GenerateOptions m_options;  // m_options.cancel points at m_cancel
  std::atomic<bool> m_cancel{false};
  bool m_keepText = true;  // false once a reader said it only waits for the end

  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::string m_pending;  // text not yet taken by next()
  bool m_finished = false;
  runtime::GenerateResult m_result;
  std::string m_error;
};

struct QueueStats {
  size_t waiting = 0;    // jobs queued for a KV slot
  size_t running = 0;    // jobs holding a slot (reading their prompt or generating)
  size_t slotCount = 0;  // jobs that can run at once (the chain's KV slots)
  // Jobs accepted and not finished: running, about to take a free slot, or waiting (what a
  // router counts as the load; running + waiting leaves out those about to start).
  size_t holding = 0;
  uint64_t completed = 0;  // jobs that ran to a finish reason other than Cancelled
  uint64_t cancelled = 0;  // jobs cancelled (client gone, or shutdown)
  uint64_t rejected = 0;   // submissions refused because the queue was full
  // How fast it generates, for a router: tokens the worker produced (streamed pieces, about one
  // per token), and the wall time of its steps, each running job counted (a step of 3 jobs that
  // took 10 ms adds 30 ms). Their ratio is the time one job waits per token, prompts included.
  uint64_t generatedTokens = 0;
  double jobSeconds = 0;
};

// What the API server hands generation jobs to: one GenerationQueue (one chain), or a router
// over the queues of several replicas of the model (replica_router.h).
class JobSink {
 public:
  enum class Submit {
    Accepted,
    Full,          // the server answers 429
    ShuttingDown,  // 503
    Unavailable,   // no replica of the model is left to run it (503)
  };
  virtual ~JobSink() = default;
  virtual Submit submit(const std::shared_ptr<GenerationJob>& job) = 0;
  virtual QueueStats stats() const = 0;  // the whole: sums over replicas
  // One entry per replica (one for a single queue), for a status page.
  virtual std::vector<QueueStats> replicaStats() const { return {stats()}; }
  virtual size_t maxWaiting() const = 0;      // jobs that may wait before Full
  virtual size_t slotCount() const = 0;       // jobs that run at once
  virtual int32_t contextLength() const = 0;  // per job: prompt + reply
};

class GenerationQueue final : public JobSink {
 public:
  // `chain` is used only by the worker thread from now on; it and `tokenizer` must outlive the
  // queue. maxWaiting bounds the jobs that wait for a slot (a burst first fills the free
  // slots); a submission beyond it is refused (the server answers 429).
  GenerationQueue(runtime::Chain& chain, const model::Tokenizer& tokenizer, size_t maxWaiting,
                  runtime::SchedulerOptions options = {});
  ~GenerationQueue() override;  // shutdown()

  GenerationQueue(const GenerationQueue&) = delete;
  GenerationQueue& operator=(const GenerationQueue&) = delete;

  // Accepted, Full or ShuttingDown.
  Submit submit(const std::shared_ptr<GenerationJob>& job) override;

  // Cancel the running jobs and every queued one (they finish as Cancelled) and join the worker.
  void shutdown();

  QueueStats stats() const override;
  size_t maxWaiting() const override { return m_maxWaiting; }
  size_t slotCount() const override { return m_slots; }
  int32_t contextLength() const override { return m_contextLength; }

 private:
  void workerLoop();
  // Hands a job to the scheduler (worker thread).
  void start(const std::shared_ptr<GenerationJob>& job);

  runtime::Scheduler m_scheduler;  // the worker's alone
  const size_t m_slots;            // m_scheduler.slotCount(), for any thread
  const int32_t m_contextLength;   // m_scheduler.contextLength(), for any thread
  const size_t m_maxWaiting;

  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::deque<std::shared_ptr<GenerationJob>> m_jobs;  // submitted, not yet given to the scheduler
  // Jobs the scheduler holds, waiting for a slot or running: an upper bound between its steps
  // (admission only lowers the first), so the queue bound is never exceeded.
  size_t m_schedulerWaiting = 0;
  size_t m_schedulerRunning = 0;
  bool m_stopping = false;
  QueueStats m_stats;
  uint64_t m_stepTokens = 0;  // the worker's count of generated pieces (its thread only)
  std::thread m_worker;       // last: started once everything above exists
};

}  // namespace shoal::api
