#pragma once
// The message format (DESIGN.md §3): CloudEvents 1.0, Kafka binding, structured mode. The record
// value is the envelope below as JSON; the record key is the saga id; the header `content-type` is
// `application/cloudevents+json`.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

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

// Parses and checks a record value. On failure returns nullopt and puts the reason (for the DLQ
// header) in `reason`.
std::optional<CloudEvent> ParseCloudEvent(std::string_view value, std::string& reason);

// W3C Trace Context: a traceparent of version 00 ("00-" 32 hex "-" 16 hex "-" 2 hex, lowercase, ids
// not all zeros) or of a later version (its first four fields in that form); a tracestate of up to
// 512 printable ASCII characters. What fails is dropped, as the specification asks of a receiver.
bool ValidTraceparent(std::string_view text);
bool ValidTracestate(std::string_view text);

// Now, in RFC 3339 with milliseconds, UTC.
std::string NowRfc3339();

}  // namespace sagaflow::outbox
