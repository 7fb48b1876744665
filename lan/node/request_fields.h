#pragma once
// Reading a node-protocol request's fields (lan/node/README.md): each reader checks the type and
// range of what a peer sent and throws shoal::Error naming the op and the field, so NodeHost's
// handlers answer a malformed request with an `error` reply instead of acting on it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/runtime/sampler.h"
#include "lan/transport/connection.h"

namespace shoal::lan {

// A required integer field within [lo, hi].
int32_t intField(const nlohmann::json& c, const char* field, int64_t lo, int64_t hi);
// A required non-negative integer field (a byte count, an offset, a type id).
uint64_t unsignedField(const nlohmann::json& c, const char* field);
// An optional string field: "" when absent; shoal::Error naming the op and the field when it
// holds another JSON type (json::value would throw its own type_error, which names neither).
std::string stringField(const nlohmann::json& c, const char* field);
// An optional boolean field: true only when present and true.
bool boolField(const nlohmann::json& c, const char* field);
// A stage_id (a string or an integer) as the key stages are stored under.
std::string stageKey(const nlohmann::json& stageId);
// Whether `s` is a lowercase hex SHA-256 (64 characters).
bool isHexSha256(const std::string& s);
// A sampling request ("sample", or a segment's own) over the defaults: missing fields keep them.
// `where` names the field in the error for anything but an object, and for a field of the wrong
// type or range (the floats must be finite numbers, top_k an int32, seed a non-negative integer).
runtime::SamplerParams samplerFields(const nlohmann::json& fields, const std::string& where);
// The reply skeleton to `request`: {"op": op} and the request's "id".
Message reply(const Message& request, const std::string& op);

}  // namespace shoal::lan
