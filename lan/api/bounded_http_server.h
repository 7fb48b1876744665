#pragma once
// cpp-httplib's Server with a byte bound on everything it reads from a connection.
//
// Debian's cpp-httplib 0.11.4 reads a request line or header line into a buffer that grows until
// the line ends (its 8 KiB line limit is checked only after the whole line is in memory), so a
// client sending one endless line grows the process without bound (measured: 8 connections of
// 32 MB each took a node up 290-680 MB). The library has no hook for that, but it serves each
// connection through the virtual process_and_close_socket() and a Stream; this subclass serves
// it through BoundedSocketStream, which refuses to deliver more than `maxHeadBytes` before the
// head's blank line, nor more than `maxBodyBytes` after it. A read past a bound fails as a closed
// socket would: the library answers 400 (or nothing) and the connection closes.
//
// One request per connection (the caller also sets set_keep_alive_max_count(1)): after a request
// that was refused before its body was read, the rest of the connection is not a request.
//
// Connections are served by a BoundedTaskQueue (bounded_task_queue.h), so accepted connections
// waiting for a thread are bounded too; stopServing() (not Server::stop()) stops it even while
// the accept loop waits for room in that queue.

#include <httplib.h>

#include <cstddef>
#include <memory>
#include <mutex>

namespace shoal::api {

class BoundedTaskQueue;

class BoundedHttpServer : public httplib::Server {
 public:
  // maxHeadBytes: request line plus headers plus the blank line; maxBodyBytes: what may follow;
  // threads: connections served at once; maxPending: accepted connections waiting for a thread.
  BoundedHttpServer(size_t maxHeadBytes, size_t maxBodyBytes, size_t threads, size_t maxPending);

  // Server::stop(), then wakes an accept loop blocked on a full queue so that listen returns.
  // Thread-safe.
  void stopServing();

 private:
  // Replaces httplib::Server's: one request through a BoundedSocketStream, then close.
  bool process_and_close_socket(socket_t sock) override;

  size_t m_maxHeadBytes;
  size_t m_maxBodyBytes;
  std::mutex m_tasksMutex;                    // guards the fields below
  std::shared_ptr<BoundedTaskQueue> m_tasks;  // the running listen's queue; null before
  bool m_stopping = false;
};

}  // namespace shoal::api
