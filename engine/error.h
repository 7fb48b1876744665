#pragma once
// The one exception type the engine throws. Messages carry context, e.g.
// "tensor blk.3.attn_q.weight: offset 0x1f00 beyond end of file (size 4096)".
// Callers at the program boundary (CLI, node, GUI) print what() on one line.

#include <stdexcept>
#include <string>

namespace shoal {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shoal
