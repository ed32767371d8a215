#include <doctest/doctest.h>

#include <set>
#include <string>
#include <tuple>

#include "core/saga_id.hpp"
#include "outbox/event.hpp"
#include "outbox/uuid.hpp"
#include "store/inbox.hpp"

using sagaflow::outbox::UuidV7Generator;

TEST_CASE("UUID v7: canonical form, version 7, RFC variant, the timestamp in front") {
    UuidV7Generator generator;
    const std::string id = generator.Next(0x0190'1234'5678ULL);
    CHECK(sagaflow::store::IsUuid(id));
    CHECK(id.substr(0, 13) == "01901234-5678");
    CHECK(id[14] == '7');
    CHECK(std::string("89ab").find(id[19]) != std::string::npos);
}

TEST_CASE("UUID v7 is strictly increasing within one millisecond, past the counter, and if the clock goes back") {
    UuidV7Generator generator;
    std::string previous;
    std::set<std::string> seen;
    for (int i = 0; i < 10'000; ++i) {  // > 4096: the 12-bit counter overflows and borrows the next ms
        const std::string id = generator.Next(i < 9000 ? 1'700'000'000'000ULL : 1'699'999'999'000ULL);
        CHECK(id > previous);
        previous = id;
        seen.insert(id);
    }
    CHECK(seen.size() == 10'000);
}

TEST_CASE("CloudEvents: a well-formed record parses; a malformed one says why") {
    sagaflow::outbox::CloudEvent event;
    event.id = sagaflow::outbox::NewUuidV7();
    event.type = "ChargePayment.v1";
    event.source = "sagaflow/test";
    event.saga_id = "s-1";
    event.data = {{"amount", "10.00"}};
    std::string reason;
    const auto parsed = sagaflow::outbox::ParseCloudEvent(event.ToJson().dump(), reason);
    REQUIRE(parsed);
    CHECK(parsed->id == event.id);
    CHECK(parsed->data == event.data);
    CHECK(parsed->saga_id == "s-1");
    const std::pair<std::string, std::string> cases[] = {
        {"not json", "not JSON"},
        {"[1]", "not a JSON object"},
        {R"({"specversion":"0.3","id":"x"})", "not a CloudEvent: specversion is not \"1.0\""},
        {R"({"specversion":"1.0","type":"t","source":"s"})", "no id"},
        {R"({"specversion":"1.0","id":"123","type":"t","source":"s"})", "id is not a UUID"},
        {R"({"specversion":"1.0","id":"01901234-5678-7000-8000-000000000000"})",
         "not a CloudEvent: type and source are required"},
    };
    for (const auto& [value, expected] : cases) {
        CAPTURE(value);
        CHECK_FALSE(sagaflow::outbox::ParseCloudEvent(value, reason));
        CHECK(reason == expected);
    }
}

TEST_CASE("CloudEvents distributed tracing: a valid W3C traceparent travels, an invalid one is dropped") {
    using sagaflow::outbox::ValidTraceparent;
    using sagaflow::outbox::ValidTracestate;
    const std::string good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    CHECK(ValidTraceparent(good));
    CHECK(ValidTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-fields"));
    CHECK_FALSE(ValidTraceparent(""));
    CHECK_FALSE(ValidTraceparent(good + "-x"));  // version 00 has exactly four fields
    CHECK_FALSE(ValidTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));  // zero trace id
    CHECK_FALSE(ValidTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));  // zero parent id
    CHECK_FALSE(ValidTraceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));  // uppercase
    CHECK_FALSE(ValidTraceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));  // forbidden version
    CHECK_FALSE(ValidTraceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
    CHECK(ValidTracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
    CHECK_FALSE(ValidTracestate(std::string(513, 'a')));
    CHECK_FALSE(ValidTracestate("a=\n"));

    sagaflow::outbox::CloudEvent event;
    event.id = sagaflow::outbox::NewUuidV7();
    event.type = "ChargePayment.v1";
    event.source = "sagaflow/test";
    event.traceparent = good;
    event.tracestate = "congo=t61rcWkgMzE";
    const auto json = event.ToJson();
    CHECK(json["traceparent"] == good);
    CHECK(json["tracestate"] == "congo=t61rcWkgMzE");
    std::string reason;
    const auto parsed = sagaflow::outbox::ParseCloudEvent(json.dump(), reason);
    REQUIRE(parsed);
    CHECK(parsed->traceparent == good);
    CHECK(parsed->tracestate == "congo=t61rcWkgMzE");
    auto bad = json;
    bad["traceparent"] = "00-xyz";
    const auto dropped = sagaflow::outbox::ParseCloudEvent(bad.dump(), reason);
    REQUIRE(dropped);
    CHECK(dropped->traceparent.empty());
    CHECK(dropped->tracestate.empty());  // a tracestate without its traceparent means nothing
    event.traceparent.clear();
    CHECK_FALSE(event.ToJson().contains("traceparent"));
    CHECK_FALSE(event.ToJson().contains("tracestate"));
}

TEST_CASE("a saga id is parsed once: UUID text in either case, nothing else") {
    using sagaflow::SagaId;
    const auto id = SagaId::Parse("0190a5b2-7c3e-7def-8a12-3456789ABCDE");
    REQUIRE(id.has_value());
    CHECK(id->Text() == "0190a5b2-7c3e-7def-8a12-3456789ABCDE");
    CHECK(SagaId::Parse(sagaflow::outbox::NewUuidV7()).has_value());
    for (const char* bad : {"",
                            "0190a5b2-7c3e-7def-8a12-3456789abcd",         // one digit short
                            "0190a5b2-7c3e-7def-8a12-3456789abcdef",       // one too many
                            "0190a5b27c3e-7def-8a12-3456789abcde-",        // a dash out of place
                            "0190a5b2-7c3e-7def-8a12-3456789abcdg",        // not hex
                            "0190a5b2-7c3e-7def-8a12-3456789abcd\xe9"}) {  // a byte above 0x7f
        INFO(bad);
        CHECK_FALSE(SagaId::Parse(bad).has_value());
        CHECK_FALSE(sagaflow::store::IsUuid(bad));  // the store's check is the same one
    }
}

TEST_CASE("a Kafka record is read in structured or binary mode; anything else names what it saw and expects") {
    using sagaflow::outbox::ParseKafkaRecord;
    using sagaflow::outbox::RecordHeaders;
    const std::string id = "01901234-5678-7000-8000-000000000000";
    const RecordHeaders binary{{"ce_specversion", "1.0"},
                               {"ce_id", id},
                               {"ce_type", "ChargePayment.v1.reply"},
                               {"ce_source", "payment-ts"},
                               {"ce_sagaid", "01901234-5678-7000-8000-0000000000aa"},
                               {"ce_stepname", "charge"},
                               {"ce_phase", "action"},
                               {"ce_correlationid", "01901234-5678-7000-8000-0000000000bb"},
                               {"content-type", "application/json; charset=utf-8"}};
    std::string reason;
    const auto read = ParseKafkaRecord(R"({"outcome":"success","paymentId":"p-1"})", binary, reason);
    REQUIRE_MESSAGE(read, reason);
    CHECK(read->id == id);
    CHECK(read->type == "ChargePayment.v1.reply");
    CHECK(read->saga_id == "01901234-5678-7000-8000-0000000000aa");
    CHECK(read->step_name == "charge");
    CHECK(read->phase == "action");
    CHECK(read->correlation_id == "01901234-5678-7000-8000-0000000000bb");
    CHECK(read->data == nlohmann::json{{"outcome", "success"}, {"paymentId", "p-1"}});

    // Structured mode, with its content-type or without any.
    sagaflow::outbox::CloudEvent event;
    event.id = id;
    event.type = "T.v1";
    event.source = "s";
    event.data = {{"a", 1}};
    const std::string structured = event.ToJson().dump();
    CHECK(ParseKafkaRecord(structured, {{"content-type", "application/cloudevents+json"}}, reason));
    CHECK(ParseKafkaRecord(structured, {}, reason));
    CHECK(ParseKafkaRecord(structured, {{"content-type", "application/json"}}, reason));

    auto no_content_type = binary;
    no_content_type.erase("content-type");
    CHECK(ParseKafkaRecord(R"({"outcome":"success"})", no_content_type, reason));  // JSON data by default
    auto no_data = ParseKafkaRecord("", no_content_type, reason);
    REQUIRE(no_data);
    CHECK(no_data->data == nlohmann::json::object());

    auto old_version = binary;
    old_version["ce_specversion"] = "0.3";
    auto no_id = binary;
    no_id.erase("ce_id");
    auto avro = binary;
    avro["content-type"] = "application/avro";
    const std::tuple<std::string, RecordHeaders, std::string> refused[] = {
        {R"({"outcome":"success"})", old_version, "binary-mode CloudEvent: ce_specversion is '0.3', not \"1.0\""},
        {R"({"outcome":"success"})", no_id, "no id"},
        {"\x01\x02",
         avro,
         "binary-mode CloudEvent with data of content-type 'application/avro': sagaflow reads JSON data "
         "(content-type application/json)"},
        {"not json", binary, "binary-mode CloudEvent whose data (the record value) is not JSON"},
        {structured,
         {{"content-type", "application/cloudevents+avro"}},
         "structured-mode CloudEvent in format 'application/cloudevents+avro': sagaflow reads "
         "application/cloudevents+json"},
        {"hello",
         {{"content-type", "text/plain"}},
         "not a CloudEvent: content-type 'text/plain' and no ce_specversion header; send structured mode "
         "(content-type application/cloudevents+json) or binary mode (ce_* headers, JSON data)"},
        {R"({"outcome":"success"})",
         {},
         "not a CloudEvent: no specversion in the value (structured mode) and no ce_specversion header (binary "
         "mode)"},
    };
    for (const auto& [value, headers, expected] : refused) {
        CAPTURE(value);
        CHECK_FALSE(ParseKafkaRecord(value, headers, reason));
        CHECK(reason == expected);
    }
}
