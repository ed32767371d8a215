#include <doctest/doctest.h>

#include <set>
#include <string>

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
