#include "lan/api/generation_queue.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

namespace shoal::api {

GenerationJob::GenerationJob(std::vector<model::TokenId> prompt, runtime::GenerateOptions options)
    : m_prompt(std::move(prompt)), m_options(std::move(options)) {
  m_options.cancel = &m_cancel;
}

GenerationJob::Event GenerationJob::next(std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_mutex);
  m_changed.wait_for(lock, timeout, [&] { return !m_pending.empty() || m_finished; });
  if (!m_pending.empty()) {
    text.swap(m_pending);
    m_pending.clear();
    return Event::Text;
  }
  return m_finished ? Event::Finished : Event::Timeout;
}

void GenerationJob::waitFinished() {
  std::unique_lock lock(m_mutex);
  m_keepText = false;
  m_pending.clear();
  m_changed.wait(lock, [&] { return m_finished; });
}

void GenerationJob::push(std::string_view piece) {
  {
    std::lock_guard lock(m_mutex);
    if (!m_keepText) return;
    m_pending.append(piece);
  }
  m_changed.notify_all();
}

void GenerationJob::finish(runtime::GenerateResult result, std::string error) {
  {
    std::lock_guard lock(m_mutex);
    m_result = std::move(result);
    m_error = std::move(error);
    m_finished = true;
  }
  m_changed.notify_all();
}

GenerationQueue::GenerationQueue(runtime::Chain& chain, const model::Tokenizer& tokenizer,
                                 size_t maxWaiting, runtime::SchedulerOptions options)
    : m_scheduler(chain, tokenizer, options),
      m_slots(m_scheduler.slotCount()),
      m_contextLength(m_scheduler.contextLength()),
      m_maxWaiting(maxWaiting),
      m_worker([this] { workerLoop(); }) {}

GenerationQueue::~GenerationQueue() { shutdown(); }

GenerationQueue::Submit GenerationQueue::submit(const std::shared_ptr<GenerationJob>& job) {
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping) return Submit::ShuttingDown;
    // Everything accepted and not finished: what runs (up to the slots) and what waits.
    if (m_jobs.size() + m_schedulerWaiting + m_schedulerRunning >= m_slots + m_maxWaiting) {
      ++m_stats.rejected;
      return Submit::Full;
    }
    m_jobs.push_back(job);
  }
  m_wake.notify_one();
  return Submit::Accepted;
}

void GenerationQueue::shutdown() {
  std::deque<std::shared_ptr<GenerationJob>> dropped;
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping && !m_worker.joinable()) return;
    m_stopping = true;
    dropped.swap(m_jobs);
    m_stats.cancelled += dropped.size();
  }
  m_wake.notify_all();
  // Jobs never handed to the scheduler: finish them so their readers stop waiting.
  for (const auto& job : dropped) {
    job->cancel();
    runtime::GenerateResult r;
    r.finish = runtime::FinishReason::Cancelled;
    job->finish(std::move(r), "the server is shutting down");
  }
  // The worker cancels what the scheduler holds before it returns.
  if (m_worker.joinable()) m_worker.join();
}

QueueStats GenerationQueue::stats() const {
  std::lock_guard lock(m_mutex);
  QueueStats s = m_stats;
  // Jobs not yet handed to the scheduler take a free slot first.
  const size_t pending = m_jobs.size() + m_schedulerWaiting;
  const size_t free = m_slots > m_schedulerRunning ? m_slots - m_schedulerRunning : 0;
  s.waiting = pending > free ? pending - free : 0;
  s.running = m_schedulerRunning;
  s.slotCount = m_slots;
  s.holding = m_jobs.size() + m_schedulerWaiting + m_schedulerRunning;
  return s;
}

void GenerationQueue::start(const std::shared_ptr<GenerationJob>& job) {
  runtime::Scheduler::Request r;
  r.prompt = job->m_prompt;
  r.options = job->m_options;  // its cancel flag is the job's
  r.onText = [this, job](std::string_view piece) {
    ++m_stepTokens;
    job->push(piece);
    return !job->cancelled();
  };
  r.onFinish = [this, job](const runtime::GenerateResult& result, std::string_view error) {
    {
      std::lock_guard lock(m_mutex);
      if (result.finish == runtime::FinishReason::Cancelled) {
        ++m_stats.cancelled;
      } else if (error.empty()) {
        ++m_stats.completed;
      }
    }
    job->finish(result, std::string(error));
  };
  try {
    m_scheduler.add(std::move(r));
  } catch (const std::exception& e) {
    // The server validated the prompt; this is a last line of defence, not a crash.
    job->finish({}, e.what());
  }
}

void GenerationQueue::workerLoop() {
  std::deque<std::shared_ptr<GenerationJob>> incoming;
  double stepJobSeconds = 0;  // the last step's wall time × the jobs it ran
  for (;;) {
    {
      std::unique_lock lock(m_mutex);
      const runtime::SchedulerStats st = m_scheduler.stats();
      m_schedulerWaiting = st.waiting;
      m_schedulerRunning = st.active;
      m_stats.generatedTokens += std::exchange(m_stepTokens, 0);
      m_stats.jobSeconds += std::exchange(stepJobSeconds, 0.0);
      m_wake.wait(lock, [&] { return m_stopping || !m_jobs.empty() || !m_scheduler.idle(); });
      if (m_stopping) break;
      incoming.swap(m_jobs);
      // Counted as the scheduler's from now on, before it sees them.
      m_schedulerWaiting += incoming.size();
    }
    for (const auto& job : incoming) {
      if (job->cancelled()) {
        // The client left while it waited: nothing to compute.
        runtime::GenerateResult r;
        r.finish = runtime::FinishReason::Cancelled;
        {
          std::lock_guard lock(m_mutex);
          ++m_stats.cancelled;
        }
        job->finish(std::move(r), {});
      } else {
        start(job);
      }
    }
    incoming.clear();
    const size_t running = m_scheduler.stats().active;
    const auto t0 = std::chrono::steady_clock::now();
    m_scheduler.step();
    stepJobSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() *
                     static_cast<double>(std::max<size_t>(running, m_scheduler.stats().active));
  }
  // Shutting down: every job the scheduler holds ends as Cancelled (their readers stop waiting).
  m_scheduler.cancelAll();
  {
    std::lock_guard lock(m_mutex);
    m_schedulerWaiting = m_schedulerRunning = 0;
  }
}

}  // namespace shoal::api
