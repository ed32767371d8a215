// libFuzzer target over a Kafka record as the consumers read it (outbox::ParseKafkaRecord): the
// first bytes choose the headers (structured or binary CloudEvents mode, content types), the rest is
// the value. Any record in, an event or a reason out: never a crash, a hang, or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "outbox/event.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const auto choice = static_cast<unsigned char>(bytes[0]);
    const std::string_view value = bytes.substr(1);
    sagaflow::outbox::RecordHeaders headers;
    if (choice & 1) headers["content-type"] = "application/cloudevents+json";
    if (choice & 2) headers["content-type"] = "application/json; charset=utf-8";
    if (choice & 4) {
        headers["ce_specversion"] = "1.0";
        headers["ce_id"] = "0190a5a8-7c3e-7000-8000-000000000001";
        headers["ce_type"] = "ChargePayment.v1.reply";
        headers["ce_source"] = "fuzz";
        headers["ce_sagaid"] = "0190a5a8-7c3e-7000-8000-000000000002";
    }
    if (choice & 8) headers["ce_traceparent"] = std::string(value.substr(0, 60));
    std::string reason;
    if (const auto event = sagaflow::outbox::ParseKafkaRecord(value, headers, reason)) {
        static_cast<void>(event->ToJson().dump());
    }
    return 0;
}
