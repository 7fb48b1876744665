#pragma once
// Pool files: a pool, a model's costs and a request, as JSON (what `shoal-cli plan --pool`
// reads and bench/plan_sim writes). Parsing only; the caller reads the file.
//
// {
//   "model": {                               optional when the caller supplies the model
//     "layers": 32,                            L, integer >= 1
//     "layer_weight_bytes": 1.3e8,             W        (numbers: finite, >= 0)
//     "layer_flops_per_token": 4.4e8,          F
//     "kv_bytes_per_token_per_layer": 4096,    K
//     "hidden_bytes_per_token": 16384,         A
//     "embed_bytes": 2.9e8,                    E
//     "head_bytes": 4.3e8,                     H
//     "shared_embed_head_bytes": 0,            of E and H (tied output; optional, default 0)
//     "head_flops_per_token": 1.05e9,          FH
//     "per_layer": [                           optional: L entries when the layers differ
//       {"weight_bytes": 1.3e8,                  W_l
//        "read_bytes_per_token": 4e7,            R_l, optional (default W_l; MoE: less)
//        "flops_per_token": 8e7,                 F_l
//        "kv_bytes_per_position": 4096,          K_l
//        "window": 1024}                         w_l, optional (default 0: the whole context)
//     ]                                        with per_layer, W, F and K may be left out
//   },
//   "request": {"context_tokens": 4096, "sequences": 1},   optional; these are the defaults
//   "devices": [                             at least one
//     {"id": "pc-4090", "node": "pc", "memory_bytes": 2.2e10,
//      "bandwidth_bytes_per_s": 1.0e12, "flops_per_s": 1.65e14}       (B, P > 0)
//   ],
//   "links": [                               one per node pair; required between every two
//     {"nodes": ["pc", "mac"], "latency_s": 2e-4, "bandwidth_bytes_per_s": 1.25e8}
//   ],                                       nodes unless "default_link" is given
//   "intra_node": {"latency_s": 1e-5, "bandwidth_bytes_per_s": 2.5e10},   optional (default)
//   "default_link": {"latency_s": 0.05, "bandwidth_bytes_per_s": 1.25e7}  optional
// }
//
// Every object may also carry a "comment" string. Any other unknown key, a missing required
// field, a wrong type or an out-of-range value is an error naming the field's path, e.g.
// "devices[2].memory_bytes: must be >= 0, got -5".

#include <optional>
#include <string>
#include <string_view>

#include "engine/plan/types.h"

namespace shoal::plan {

struct PoolFile {
  Pool pool;
  std::optional<ModelCost> model;  // absent when the file has no "model" block
  Request request;
};

// Throws shoal::Error ("pool file: <field path>: <what is wrong>"). With requireModel, a file
// without a "model" block is an error too.
PoolFile parsePoolFile(std::string_view json, bool requireModel);

// The JSON text of a pool file (parsePoolFile reads it back to the same values).
std::string writePoolFile(const PoolFile& file);

}  // namespace shoal::plan
