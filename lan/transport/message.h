#pragma once
// The unit of the node-to-node protocol: a JSON control object plus an optional raw byte blob
// (tensor data, weight chunks). On the wire one Message is one frame (wire_format.h): a fixed
// header, the JSON text, the blob. Hidden states travel as blobs described by the JSON
// ({"dtype":"f32","shape":[count,nEmbd]}), never as JSON numbers.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace shoal::lan {

struct Message {
  nlohmann::json control = nlohmann::json::object();  // always an object with a string "op"
  std::vector<uint8_t> blob;                          // optional payload, may be empty
};

}  // namespace shoal::lan
