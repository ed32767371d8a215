#pragma once
// The message format (docs/protocol.md): CloudEvents 1.0 in the Kafka protocol binding. sagaflow
// writes structured mode: the record value is the envelope below as JSON, the record key the saga
// id, the header `content-type` is `application/cloudevents+json`. It reads structured and binary
// mode (attributes in `ce_*` headers, the value is the data, `content-type` the data's type).

#include <map>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include "core/bounded_json.hpp"

namespace sagaflow::outbox {

inline constexpr const char* kCloudEventsContentType = "application/cloudevents+json";

struct CloudEvent {
    std::string id;      // UUID v7, minted once per business operation; empty: mint on enqueue
    std::string type;    // e.g. "ChargePayment.v1"
    std::string source;  // "sagaflow/<instance>" or the participant's name
    std::string time;    // RFC 3339; empty: now, on enqueue
    std::string saga_id;
    std::string step_name;
    std::string phase;           // "action" | "compensation" (empty for events outside a saga)
    std::string correlation_id;  // a reply: the command's id
    // CloudEvents distributed-tracing extension: the W3C Trace Context of the operation (a saga's
    // starter), carried unchanged through its commands and replies; empty when there is none.
    std::string traceparent;
    std::string tracestate;
    nlohmann::json data = nlohmann::json::object();

    nlohmann::json ToJson() const;
};

// Parses and checks a structured-mode record value. On failure returns nullopt and puts the reason
// (for the DLQ header) in `reason`.
std::optional<CloudEvent> ParseCloudEvent(std::string_view value, std::string& reason, const JsonLimits& limits = {});

// A Kafka record's headers by name (the last of a repeated name).
using RecordHeaders = std::map<std::string, std::string, std::less<>>;

// A record in either content mode: `content-type: application/cloudevents+json` (or no content-type
// and a JSON value with specversion) is structured; a `ce_specversion` header is binary mode, whose
// data must be JSON (content-type absent, application/json or any +json type). Anything else fails
// with a reason that says which mode was seen and what sagaflow expects.
std::optional<CloudEvent> ParseKafkaRecord(std::string_view value,
                                           const RecordHeaders& headers,
                                           std::string& reason,
                                           const JsonLimits& limits = {});

// W3C Trace Context: a traceparent of version 00 ("00-" 32 hex "-" 16 hex "-" 2 hex, lowercase, ids
// not all zeros) or of a later version (its first four fields in that form); a tracestate of up to
// 512 printable ASCII characters. What fails is dropped, as the specification asks of a receiver.
bool ValidTraceparent(std::string_view text);
bool ValidTracestate(std::string_view text);

// Now, in RFC 3339 with milliseconds, UTC.
std::string NowRfc3339();

}  // namespace sagaflow::outbox
