#include "lan/api/generation_queue.h"

#include <exception>

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

GenerationQueue::GenerationQueue(runtime::Session& session, size_t maxWaiting)
    : m_session(session), m_maxWaiting(maxWaiting), m_worker([this] { workerLoop(); }) {}

GenerationQueue::~GenerationQueue() { shutdown(); }

GenerationQueue::Submit GenerationQueue::submit(const std::shared_ptr<GenerationJob>& job) {
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping) return Submit::ShuttingDown;
    if (m_jobs.size() >= m_maxWaiting) {
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
    if (m_running) m_running->cancel();
    dropped.swap(m_jobs);
    m_stats.cancelled += dropped.size();
  }
  m_wake.notify_all();
  // Queued jobs never started: finish them so their readers stop waiting.
  for (const auto& job : dropped) {
    job->cancel();
    runtime::GenerateResult r;
    r.finish = runtime::FinishReason::Cancelled;
    job->finish(std::move(r), "the server is shutting down");
  }
  if (m_worker.joinable()) m_worker.join();
}

QueueStats GenerationQueue::stats() const {
  std::lock_guard lock(m_mutex);
  QueueStats s = m_stats;
  s.waiting = m_jobs.size();
  s.running = m_running != nullptr;
  return s;
}

void GenerationQueue::workerLoop() {
  for (;;) {
    std::shared_ptr<GenerationJob> job;
    {
      std::unique_lock lock(m_mutex);
      m_wake.wait(lock, [&] { return m_stopping || !m_jobs.empty(); });
      if (m_stopping) return;
      job = std::move(m_jobs.front());
      m_jobs.pop_front();
      m_running = job;
    }

    runtime::GenerateResult result;
    std::string error;
    if (job->cancelled()) {
      // The client left while it waited: nothing to compute.
      result.finish = runtime::FinishReason::Cancelled;
    } else {
      try {
        result = m_session.generate(job->m_prompt, job->m_options, [&job](std::string_view piece) {
          job->push(piece);
          return !job->cancelled();
        });
      } catch (const std::exception& e) {
        error = e.what();
        // A failed generation may leave the cache in any state; start the next one clean.
        m_session.reset();
      }
    }

    {
      std::lock_guard lock(m_mutex);
      m_running.reset();
      if (result.finish == runtime::FinishReason::Cancelled) {
        ++m_stats.cancelled;
      } else if (error.empty()) {
        ++m_stats.completed;
      }
    }
    job->finish(std::move(result), std::move(error));
  }
}

}  // namespace shoal::api
