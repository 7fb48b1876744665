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

#include <httplib.h>

#include <cstddef>

namespace shoal::api {

class BoundedHttpServer : public httplib::Server {
 public:
  // maxHeadBytes: request line plus headers plus the blank line; maxBodyBytes: what may follow.
  BoundedHttpServer(size_t maxHeadBytes, size_t maxBodyBytes);

 private:
  // Replaces httplib::Server's: one request through a BoundedSocketStream, then close.
  bool process_and_close_socket(socket_t sock) override;

  size_t m_maxHeadBytes;
  size_t m_maxBodyBytes;
};

}  // namespace shoal::api
