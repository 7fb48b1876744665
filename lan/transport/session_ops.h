#pragma once
// Internal: the control ops of the session opening that follows every TLS handshake (before the
// connection is handed to the application), and of pairing. See protocol.md.
//
//   client -> server  hello        {"op":"hello","version":1}
//   server -> client  welcome      {"op":"welcome","device_id":"..."}      trusted: the session
//   starts
//                     refused      {"op":"refused","message":"..."}       then the server closes
//   client -> server  pair_start   {"op":"pair_start","name","share"}      (instead of hello)
//   server -> client  pair_reply   {"op":"pair_reply","name","share","confirm"}
//   client -> server  pair_confirm {"op":"pair_confirm","confirm"}
//   server -> client  pair_ok      {"op":"pair_ok"}                        then the server closes

namespace shoal::lan::ops {

inline constexpr const char* kHello = "hello";
inline constexpr const char* kWelcome = "welcome";
inline constexpr const char* kRefused = "refused";
inline constexpr const char* kPairStart = "pair_start";
inline constexpr const char* kPairReply = "pair_reply";
inline constexpr const char* kPairConfirm = "pair_confirm";
inline constexpr const char* kPairOk = "pair_ok";
inline constexpr int kSessionVersion = 1;

}  // namespace shoal::lan::ops
