#pragma once
// A QObject worker living on its own QThread, owned for the thread's lifetime: created here,
// moved to the thread, and at destruction stopped (Worker::stop(), callable from any thread),
// the thread ended, then deleted — after the thread has ended nothing else touches it. The
// window talks to the worker only through queued signals and slots.

#include <QThread>

namespace shoal::gui {

template <class Worker>
class WorkerThread {
 public:
  explicit WorkerThread(const char* threadName) : m_worker(new Worker) {
    m_thread.setObjectName(threadName);
    m_worker->moveToThread(&m_thread);
    m_thread.start();
  }
  ~WorkerThread() {
    m_worker->stop();
    m_thread.quit();
    m_thread.wait();
    delete m_worker;
  }
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

 protected:
  Worker* worker() const { return m_worker; }

 private:
  QThread m_thread;
  Worker* m_worker;  // owned; deleted after the thread has ended
};

}  // namespace shoal::gui
