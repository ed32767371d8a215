// Input built to hurt: nesting, long lines, alias bombs, ambiguous JSON, control characters. Each
// case here crashed, hung or answered wrongly before the bounded readers and hand-written scanners.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "config/config.hpp"
#include "core/bounded_json.hpp"
#include "core/definition.hpp"
#include "core/definition_loader.hpp"
#include "core/text_scan.hpp"
#include "outbox/event.hpp"
#include "outbox/kafka.hpp"

using sagaflow::JsonRefusal;
using sagaflow::ReadJson;

namespace {

std::string Nested(std::size_t depth, char open = '[', char close = ']') {
    return std::string(depth, open) + std::string(depth, close);
}

std::string Head() {
    return "saga: s\nversion: 1\nsteps:\n  - name: a\n    participant: p\n    kind: compensatable\n";
}

std::string Seconds(std::chrono::steady_clock::time_point since) {
    return std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count()) + " s";
}

}  // namespace

TEST_CASE("JSON from outside is refused past its depth, before anything recursive touches it") {
    JsonRefusal refusal;
    CHECK(ReadJson(Nested(64), refusal));
    CHECK_FALSE(ReadJson(Nested(65), refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kTooDeep);
    CHECK(refusal.message.find("deeper than 64 levels") != std::string::npos);

    // 100,000 levels: the body that overflowed the HTTP thread's stack.
    CHECK_FALSE(ReadJson(Nested(100'000), refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kTooDeep);
    CHECK_FALSE(ReadJson(R"({"amount":"1.00","x":)" + Nested(100'000) + "}", refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kTooDeep);
    CHECK(refusal.path.rfind("$.x", 0) == 0);

    // The path names where: an array index, then the keys.
    CHECK_FALSE(ReadJson(R"({"items":[1,{"a":[[[1]]]}]})", {1 << 20, 4}, refusal));
    CHECK(refusal.path == "$.items[1].a[0]");
}

TEST_CASE("ambiguous or unstorable JSON is refused with its path: duplicate keys, U+0000, bad UTF-8, size") {
    JsonRefusal refusal;
    CHECK_FALSE(ReadJson(R"({"amount":"1.00","amount":"900.00"})", refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kDuplicateKey);
    CHECK(refusal.message == "the value at $ has the key 'amount' twice; send each key once");
    CHECK_FALSE(ReadJson(R"({"a":{"b":1,"b":2}})", refusal));
    CHECK(refusal.path == "$.a");
    CHECK(ReadJson(R"({"a":{"b":1},"c":{"b":2}})", refusal));  // the same key in two objects is fine

    CHECK_FALSE(ReadJson(R"({"note":"a\u0000b"})", refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kNulCharacter);
    CHECK(refusal.path == "$.note");
    CHECK_FALSE(ReadJson(R"({"a\u0000":1})", refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kNulCharacter);

    CHECK_FALSE(ReadJson("{\"a\":\"\xff\"}", refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kSyntax);
    CHECK(refusal.message.find('\xff') == std::string::npos);  // the bad byte is escaped in the message

    CHECK_FALSE(ReadJson(std::string(100, ' ') + "1", {64, 8}, refusal));
    CHECK(refusal.kind == JsonRefusal::Kind::kTooLarge);

    const auto value = ReadJson(R"({"a":[1,2,{"b":null}],"c":18446744073709551615})", refusal);
    REQUIRE(value);
    CHECK((*value)["a"][2]["b"].is_null());
}

TEST_CASE("an integer input outside int64 is refused: participants would store 2^64-1 as -1") {
    sagaflow::SagaDefinition def;
    def.input.push_back({});
    def.input[0].name = "customerId";
    def.input[0].type = sagaflow::FieldType::kInteger;
    nlohmann::json input{{"customerId", 18446744073709551615ULL}};
    auto errors = sagaflow::ValidateInput(def, input);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].path == "$.customerId");
    CHECK(errors[0].message.find("-9223372036854775808 to 9223372036854775807") != std::string::npos);
    input = {{"customerId", 9223372036854775807LL}};
    CHECK(sagaflow::ValidateInput(def, input).empty());
}

TEST_CASE("an input that would make a command larger than Kafka takes is refused before the saga starts") {
    const auto loaded = sagaflow::LoadDefinitionString(
        "saga: s\nversion: 1\ninput:\n  note: {type: string}\nsteps:\n"
        "  - {name: a, participant: p, kind: compensatable, command: A.v1, compensation: U.v1, send: {n: "
        "$.input.note}}\n"
        "  - {name: b, participant: p, kind: pivot, command: B.v1, send: {x: $.sagaId}}\n",
        "t.yaml");
    REQUIRE(loaded.definition);
    const nlohmann::json small{{"note", "hi"}};
    CHECK(sagaflow::CheckCommandSizes(*loaded.definition, small, 1'000'000).empty());
    const nlohmann::json large{{"note", std::string(996'000, 'x')}};
    const auto errors = sagaflow::CheckCommandSizes(*loaded.definition, large, 1'000'000);
    REQUIRE(errors.size() == 2);  // the action and the compensation of a; b sends no input
    CHECK(errors[0].message.rfind("makes the action of step 'a' (A.v1) about 100010", 0) == 0);
    CHECK(errors[1].message.rfind("makes the compensation of step 'a' (U.v1)", 0) == 0);
}

TEST_CASE("the scanners that replace std::regex accept and refuse what the patterns did") {
    using namespace sagaflow::text;
    CHECK(IsCommandType("ChargePayment.v1"));
    CHECK(IsCommandType("Charge_Payment"));
    CHECK_FALSE(IsCommandType("ChargePayment.v"));
    CHECK_FALSE(IsCommandType("ChargePayment.1"));
    CHECK_FALSE(IsCommandType("1Charge"));
    CHECK_FALSE(IsCommandType(std::string(64, 'A')));
    CHECK(IsCommandType(std::string(63, 'A')));
    CHECK(IsKebabName("order-payment"));
    CHECK_FALSE(IsKebabName("Order"));
    CHECK_FALSE(IsKebabName("-a"));
    CHECK(IsFieldName("_x1"));
    CHECK_FALSE(IsFieldName("1x"));
    CHECK(IsDecimal("10.50"));
    CHECK(IsDecimal("-0.5"));
    CHECK(IsDecimal("0"));
    CHECK_FALSE(IsDecimal("01"));
    CHECK_FALSE(IsDecimal("1."));
    CHECK_FALSE(IsDecimal(".5"));
    CHECK_FALSE(IsDecimal("-"));
    CHECK(ParseDurationMs("30s") == 30'000);
    CHECK(ParseDurationMs("500ms") == 500);
    CHECK(ParseDurationMs("2h") == 7'200'000);
    CHECK_FALSE(ParseDurationMs("1000000000s"));
    CHECK_FALSE(ParseDurationMs("5"));
    CHECK_FALSE(ParseDurationMs("s"));
    CHECK(IsTopicName("sagaflow.replies"));
    CHECK_FALSE(IsTopicName(std::string(250, 'a')));
}

TEST_CASE("quoted outside text is cut and its control characters escaped: no forged log line") {
    using sagaflow::text::Quote;
    CHECK(Quote("reason\nERROR forged line") == "'reason\\nERROR forged line'");
    CHECK(Quote(std::string("a\0b\x1b", 4)) == "'a\\x00b\\x1b'");
    const auto cut = Quote(std::string(1'000'000, 'x'));
    CHECK(cut.size() < 200);
    CHECK(cut.find("1000000 bytes in all") != std::string::npos);
    CHECK(Quote("\xc3\xa9\xc3\xa9", 3) == "'\xc3\xa9'… (4 bytes in all)");  // never half a character
    CHECK(Quote("a\xff\xc3") == "'a\\xff\\xc3'");                           // nor a broken one
}

TEST_CASE("a 1 MB line in a definition gets a positioned error at once, not a crash") {
    // `command: A.v` and a million digits; a `send` path `$.input.` and a million letters.
    const auto start = std::chrono::steady_clock::now();
    auto result = sagaflow::LoadDefinitionString(
        Head() + "    command: A.v" + std::string(1'000'000, '1') + "\n    compensation: U.v1\n", "t.yaml");
    REQUIRE_FALSE(result.definition);
    REQUIRE_FALSE(result.diagnostics.empty());
    const auto first = result.diagnostics.front().ToString();
    CHECK(first.rfind("t.yaml:7:", 0) == 0);
    CHECK(first.find("is not a valid name") != std::string::npos);
    CHECK(first.size() < 400);

    result = sagaflow::LoadDefinitionString(
        Head() + "    command: A.v1\n    compensation: U.v1\n    send:\n      x: $.input." +
            std::string(1'000'000, 'a') + "\n",
        "t.yaml");
    REQUIRE_FALSE(result.definition);
    const auto second = result.diagnostics.front().ToString();
    CHECK(second.rfind("t.yaml:10:", 0) == 0);
    CHECK(second.find("unknown input field") != std::string::npos);
    CHECK(second.size() < 600);
    MESSAGE("both long lines answered in " << Seconds(start));
}

TEST_CASE("an input schema whose fields are aliases of the level below is refused, not expanded") {
    // Ten aliased fields per level over 8 levels: 10^8 fields if expanded.
    std::string yaml = "saga: s\nversion: 1\ninput:\n  l0: &a0 {type: string}\n";
    for (int level = 1; level <= 7; ++level) {
        yaml += "  l" + std::to_string(level) + ": &a" + std::to_string(level) + " {type: object, properties: {";
        for (int f = 0; f < 10; ++f) yaml += (f ? ", f" : "f") + std::to_string(f) + ": *a" + std::to_string(level - 1);
        yaml += "}}\n";
    }
    yaml += "steps:\n  - {name: a, participant: p, kind: pivot, command: A.v1}\n";
    const auto start = std::chrono::steady_clock::now();
    const auto result = sagaflow::LoadDefinitionString(yaml, "t.yaml");
    REQUIRE_FALSE(result.definition);
    bool named = false;
    for (const auto& d : result.diagnostics) {
        named = named || d.ToString().find("more than 1000 fields") != std::string::npos;
    }
    CHECK(named);
    MESSAGE("refused in " << Seconds(start));
}

TEST_CASE("a step list of aliases of one large step is refused, not read once per alias") {
    std::string send = "{";
    for (int k = 0; k < 60; ++k) {
        send += (k ? ", k" : "k") + std::to_string(k) + ": [";
        for (int v = 0; v < 60; ++v) send += v ? ", $.input.x" : "$.input.x";
        send += "]";
    }
    send += "}";
    const std::string head =
        "saga: s\nversion: 1\ninput:\n  x: {type: string}\nsteps:\n  - &s {name: a, participant: p, "
        "kind: retriable, command: A.v1, send: " +
        send + "}\n";
    std::string many = head;
    for (int i = 0; i < 20'000; ++i) many += "  - *s\n";
    const auto start = std::chrono::steady_clock::now();
    auto result = sagaflow::LoadDefinitionString(many, "t.yaml");
    REQUIRE_FALSE(result.definition);
    CHECK(result.diagnostics.front().ToString().find("20001 steps, more than 256") != std::string::npos);
    // Within the step cap, the nodes of all templates together are bounded.
    std::string fewer = head;
    for (int i = 0; i < 200; ++i) fewer += "  - *s\n";
    result = sagaflow::LoadDefinitionString(fewer, "t.yaml");
    REQUIRE_FALSE(result.definition);
    bool named = false;
    for (const auto& d : result.diagnostics)
        named = named || d.ToString().find("more than 65536 nodes") != std::string::npos;
    CHECK(named);
    MESSAGE("both refused in " << Seconds(start));
}

TEST_CASE("a 250,000-letter listen address is refused with its value cut, from the file and from --http") {
    const std::string listen = std::string(250'000, 'a') + ":8080";
    const auto result = sagaflow::LoadConfigString("http: {listen: \"" + listen + "\"}\n", "c.yaml", {}, ".");
    REQUIRE(result.diagnostics.size() == 1);
    const auto message = result.diagnostics[0].ToString();
    CHECK(message.rfind("c.yaml:1:", 0) == 0);
    CHECK(message.find("(250005 bytes in all)") != std::string::npos);
    CHECK(message.find("expected ADDRESS:PORT") != std::string::npos);
    CHECK(message.size() < 400);

    sagaflow::HttpConfig http;
    CHECK_FALSE(sagaflow::ParseListen(listen, http));
    CHECK(sagaflow::ParseListen("0.0.0.0:8080", http));
    CHECK(http.address == "0.0.0.0");
    CHECK(sagaflow::ParseListen("[::1]:0", http));
    CHECK(http.address == "::1");
    CHECK(http.port == 0);
    CHECK_FALSE(sagaflow::ParseListen("[::1:80", http));
    CHECK_FALSE(sagaflow::ParseListen("::1:80", http));
    CHECK_FALSE(sagaflow::ParseListen("host:65536", http));
    CHECK_FALSE(sagaflow::ParseListen("host:", http));
    CHECK_FALSE(sagaflow::ParseListen(":80", http));
}

TEST_CASE("a Kafka record nested 100,000 deep is refused with a reason, in both CloudEvents modes") {
    std::string reason;
    const std::string deep = Nested(100'000);
    const std::string structured =
        R"({"specversion":"1.0","id":"00000000-0000-4000-8000-000000000001","type":"t","source":"s","data":{"outcome":)" +
        deep + "}}";
    CHECK_FALSE(sagaflow::outbox::ParseKafkaRecord(structured, {}, reason));
    CHECK(reason.find("deeper than 64 levels") != std::string::npos);
    const sagaflow::outbox::RecordHeaders binary{{"ce_specversion", "1.0"},
                                                 {"ce_id", "00000000-0000-4000-8000-000000000001"},
                                                 {"ce_type", "t"},
                                                 {"ce_source", "s"}};
    CHECK_FALSE(sagaflow::outbox::ParseKafkaRecord(R"({"a":)" + deep + "}", binary, reason));
    CHECK(reason.find("deeper than 64 levels") != std::string::npos);
    CHECK_FALSE(sagaflow::outbox::ParseKafkaRecord(R"({"outcome":"success","outcome":"failure"})", binary, reason));
    CHECK(reason.find("twice") != std::string::npos);
}

TEST_CASE("the dead-letter producer beside a consumer gets no consumer-only property (no librdkafka warning)") {
    const auto producer = sagaflow::outbox::WithoutConsumerProperties({{"group.instance.id", "engine-1"},
                                                                       {"session.timeout.ms", "6000"},
                                                                       {"security.protocol", "ssl"},
                                                                       {"client.id", "x"}});
    CHECK(producer == sagaflow::outbox::KafkaProperties{{"client.id", "x"}, {"security.protocol", "ssl"}});
}

TEST_CASE("the depth limits come from the configuration: http.max_json_depth and kafka.max_json_depth") {
    const auto result =
        sagaflow::LoadConfigString("kafka: {max_json_depth: 10}\nhttp: {max_json_depth: 12}\n", "c.yaml", {}, ".");
    REQUIRE(result.config);
    CHECK(result.config->engine.max_json_depth == 10);
    CHECK(result.config->participant.max_json_depth == 10);
    CHECK(result.config->engine.http.max_json_depth == 12);
    CHECK_FALSE(sagaflow::LoadConfigString("kafka: {max_json_depth: 1}\n", "c.yaml", {}, ".").config);

    std::string reason;
    const sagaflow::outbox::RecordHeaders binary{{"ce_specversion", "1.0"},
                                                 {"ce_id", "00000000-0000-4000-8000-000000000001"},
                                                 {"ce_type", "t"},
                                                 {"ce_source", "s"}};
    CHECK(sagaflow::outbox::ParseKafkaRecord(R"({"a":[[1]]})", binary, reason, {1 << 20, 3}));
    CHECK_FALSE(sagaflow::outbox::ParseKafkaRecord(R"({"a":[[[1]]]})", binary, reason, {1 << 20, 3}));
    CHECK(reason.find("deeper than 3 levels") != std::string::npos);
}
