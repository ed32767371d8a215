#include "outbox/event.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "store/inbox.hpp"

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

std::optional<CloudEvent> ParseCloudEvent(std::string_view value, std::string& reason) {
    const auto json = nlohmann::json::parse(value.begin(), value.end(), nullptr, false);
    if (json.is_discarded()) {
        reason = "not JSON";
        return std::nullopt;
    }
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
    CloudEvent event;
    event.id = text("id");
    if (event.id.empty()) {
        reason = "no id";
        return std::nullopt;
    }
    if (!store::IsUuid(event.id)) {
        reason = "id is not a UUID";
        return std::nullopt;
    }
    event.type = text("type");
    event.source = text("source");
    if (event.type.empty() || event.source.empty()) {
        reason = "not a CloudEvent: type and source are required";
        return std::nullopt;
    }
    event.time = text("time");
    event.saga_id = text("sagaid");
    event.step_name = text("stepname");
    event.phase = text("phase");
    event.correlation_id = text("correlationid");
    if (ValidTraceparent(text("traceparent"))) {
        event.traceparent = text("traceparent");
        if (ValidTracestate(text("tracestate"))) event.tracestate = text("tracestate");
    }
    if (const auto it = json.find("data"); it != json.end()) event.data = *it;
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
