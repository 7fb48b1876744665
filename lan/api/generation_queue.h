#pragma once
// One inference worker and a bounded FIFO of generation jobs in front of it.
//
// Threading contract: the worker thread is the only one that touches the Session (and so the
// chain and its KV cache). HTTP threads submit a GenerationJob and then read what it produces
// through the job itself (pieces of text, then the result), so a slow client never stalls the
// worker and the worker never touches a socket. A job is cancelled by its own flag (set by the
// HTTP thread when the client has gone); the worker checks it before every token and moves on to
// the next job.
//
// Fairness: first come, first served, one job at a time. Batching several sequences through the
// chain at once is a later optimisation; the queue is where it would go.

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

 private:
  friend class GenerationQueue;
  void push(std::string_view piece);
  void finish(runtime::GenerateResult result, std::string error);

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
  size_t waiting = 0;      // jobs queued, not started
  bool running = false;    // a job is being generated
  uint64_t completed = 0;  // jobs that ran to a finish reason other than Cancelled
  uint64_t cancelled = 0;  // jobs cancelled (client gone, or shutdown)
  uint64_t rejected = 0;   // submissions refused because the queue was full
};

class GenerationQueue {
 public:
  // `session` is used only by the worker thread from now on. maxWaiting bounds the jobs that wait
  // behind the running one; a submission beyond it is refused (the server answers 429).
  GenerationQueue(runtime::Session& session, size_t maxWaiting);
  ~GenerationQueue();  // shutdown()

  GenerationQueue(const GenerationQueue&) = delete;
  GenerationQueue& operator=(const GenerationQueue&) = delete;

  enum class Submit { Accepted, Full, ShuttingDown };
  Submit submit(const std::shared_ptr<GenerationJob>& job);

  // Cancel the running job and every queued one (they finish as Cancelled) and join the worker.
  void shutdown();

  QueueStats stats() const;
  size_t maxWaiting() const { return m_maxWaiting; }

 private:
  void workerLoop();

  runtime::Session& m_session;
  const size_t m_maxWaiting;

  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::deque<std::shared_ptr<GenerationJob>> m_jobs;
  std::shared_ptr<GenerationJob> m_running;
  bool m_stopping = false;
  QueueStats m_stats;
  std::thread m_worker;  // last: started once everything above exists
};

}  // namespace shoal::api
