#include "outbox/event.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/bounded_json.hpp"
#include "core/saga_id.hpp"
#include "core/text_scan.hpp"

namespace sagaflow::outbox {

nlohmann::json CloudEvent::ToJson() const {
    nlohmann::json out{{"specversion", "1.0"},
                       {"id", id},
                       {"type", type},
                       {"source", source},
                       {"time", time},
                       {"datacontenttype", "application/json"},
                       {"data", data}};
    if (!saga_id.empty()) out["sagaid"] = saga_id;
    if (!step_name.empty()) out["stepname"] = step_name;
    if (!phase.empty()) out["phase"] = phase;
    if (!correlation_id.empty()) out["correlationid"] = correlation_id;
    if (!traceparent.empty()) {
        out["traceparent"] = traceparent;
        if (!tracestate.empty()) out["tracestate"] = tracestate;
    }
    return out;
}

namespace {

// The attributes both modes share, checked alike. `attribute` reads one by name (empty: absent).
template <typename Attribute>
std::optional<CloudEvent> ReadAttributes(const Attribute& attribute, std::string& reason) {
    CloudEvent event;
    event.id = attribute("id");
    if (event.id.empty()) {
        reason = "no id";
        return std::nullopt;
    }
    if (!IsUuidText(event.id)) {
        reason = "id is not a UUID";
        return std::nullopt;
    }
    event.type = attribute("type");
    event.source = attribute("source");
    if (event.type.empty() || event.source.empty()) {
        reason = "not a CloudEvent: type and source are required";
        return std::nullopt;
    }
    event.time = attribute("time");
    event.saga_id = attribute("sagaid");
    event.step_name = attribute("stepname");
    event.phase = attribute("phase");
    event.correlation_id = attribute("correlationid");
    if (ValidTraceparent(attribute("traceparent"))) {
        event.traceparent = attribute("traceparent");
        if (ValidTracestate(attribute("tracestate"))) event.tracestate = attribute("tracestate");
    }
    return event;
}

// The media type of a content-type value, lowercase, without parameters ("; charset=utf-8").
std::string MediaType(std::string_view content_type) {
    std::string out(content_type.substr(0, content_type.find(';')));
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

bool IsJsonMediaType(const std::string& type) {
    return type == "application/json" || (type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0);
}

std::optional<CloudEvent> ParseBinary(std::string_view value,
                                      const RecordHeaders& headers,
                                      const std::optional<std::string>& content_type,
                                      std::string& reason,
                                      const JsonLimits& limits) {
    const auto header = [&](const char* name) -> std::string {
        const auto it = headers.find(std::string("ce_") + name);
        return it == headers.end() ? std::string() : it->second;
    };
    if (header("specversion") != "1.0") {
        reason = "binary-mode CloudEvent: ce_specversion is " + text::Quote(header("specversion")) + ", not \"1.0\"";
        return std::nullopt;
    }
    if (content_type && !IsJsonMediaType(MediaType(*content_type))) {
        reason = "binary-mode CloudEvent with data of content-type " + text::Quote(*content_type) +
                 ": sagaflow reads JSON data (content-type application/json)";
        return std::nullopt;
    }
    auto event = ReadAttributes(header, reason);
    if (!event) return std::nullopt;
    if (value.empty()) return event;  // no data: an empty object
    JsonRefusal refusal;
    auto data = ReadJson(value, limits, refusal);
    if (!data) {
        reason = refusal.kind == JsonRefusal::Kind::kSyntax
                     ? "binary-mode CloudEvent whose data (the record value) is not JSON"
                     : "binary-mode CloudEvent whose data (the record value) is refused: " + refusal.message;
        return std::nullopt;
    }
    event->data = std::move(*data);
    return event;
}

}  // namespace

std::optional<CloudEvent> ParseCloudEvent(std::string_view value, std::string& reason, const JsonLimits& limits) {
    JsonRefusal refusal;
    auto parsed = ReadJson(value, limits, refusal);
    if (!parsed) {
        reason = refusal.kind == JsonRefusal::Kind::kSyntax ? "not JSON" : "refused: " + refusal.message;
        return std::nullopt;
    }
    auto& json = *parsed;
    if (!json.is_object()) {
        reason = "not a JSON object";
        return std::nullopt;
    }
    const auto text = [&](const char* key) -> std::string {
        const auto it = json.find(key);
        return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    if (text("specversion") != "1.0") {
        reason = "not a CloudEvent: specversion is not \"1.0\"";
        return std::nullopt;
    }
    auto event = ReadAttributes(text, reason);
    if (!event) return std::nullopt;
    if (const auto it = json.find("data"); it != json.end()) event->data = std::move(*it);
    return event;
}

std::optional<CloudEvent> ParseKafkaRecord(std::string_view value,
                                           const RecordHeaders& headers,
                                           std::string& reason,
                                           const JsonLimits& limits) {
    std::optional<std::string> content_type;
    if (const auto it = headers.find("content-type"); it != headers.end()) content_type = it->second;
    const std::string media = content_type ? MediaType(*content_type) : std::string();
    if (media.rfind("application/cloudevents", 0) == 0) {
        if (media != kCloudEventsContentType) {
            reason = "structured-mode CloudEvent in format " + text::Quote(*content_type) +
                     ": sagaflow reads application/cloudevents+json";
            return std::nullopt;
        }
        return ParseCloudEvent(value, reason, limits);
    }
    if (headers.count("ce_specversion") != 0) return ParseBinary(value, headers, content_type, reason, limits);
    if (content_type && !IsJsonMediaType(media)) {
        reason = "not a CloudEvent: content-type " + text::Quote(*content_type) +
                 " and no ce_specversion header; send structured mode (content-type "
                 "application/cloudevents+json) or binary mode (ce_* headers, JSON data)";
        return std::nullopt;
    }
    // No content-type (or a JSON one) and no ce_ headers: a structured value whose header was left off.
    auto event = ParseCloudEvent(value, reason, limits);
    if (!event && reason.rfind("not a CloudEvent: specversion", 0) == 0) {
        reason =
            "not a CloudEvent: no specversion in the value (structured mode) and no ce_specversion header "
            "(binary mode)";
    }
    return event;
}

bool ValidTraceparent(std::string_view text) {
    const auto hex = [&](std::size_t from, std::size_t count) {
        bool nonzero = false;
        for (std::size_t i = from; i < from + count; ++i) {
            const char c = text[i];
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::optional<bool>();
            nonzero = nonzero || c != '0';
        }
        return std::optional<bool>(nonzero);
    };
    if (text.size() < 55 || text[2] != '-' || text[35] != '-' || text[52] != '-') return false;
    const auto version = hex(0, 2);
    const auto trace_id = hex(3, 32);
    const auto parent_id = hex(36, 16);
    if (!version || !trace_id || !*trace_id || !parent_id || !*parent_id || !hex(53, 2)) return false;
    if (text.substr(0, 2) == "ff") return false;
    // Version 00 is exactly these fields; a later version may append "-..." after them.
    return text.substr(0, 2) == "00" ? text.size() == 55 : text.size() == 55 || text[55] == '-';
}

bool ValidTracestate(std::string_view text) {
    return !text.empty() && text.size() <= 512 &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

std::string NowRfc3339() {
    const auto now = std::chrono::system_clock::now();
    const auto seconds = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char buffer[64];
    std::snprintf(buffer,
                  sizeof buffer,
                  "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                  utc.tm_year + 1900,
                  utc.tm_mon + 1,
                  utc.tm_mday,
                  utc.tm_hour,
                  utc.tm_min,
                  utc.tm_sec,
                  static_cast<int>(ms));
    return buffer;
}

}  // namespace sagaflow::outbox
