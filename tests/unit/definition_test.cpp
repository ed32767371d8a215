// The pure parts of a definition: input validation with defaults, templates, backoff.
#include <doctest/doctest.h>

#include "core/definition_loader.hpp"
#include "tests/support/print.hpp"

using nlohmann::json;

namespace {
sagaflow::SagaDefinition Load(const std::string& yaml) {
    auto result = sagaflow::LoadDefinitionString(yaml, "t.yaml");
    REQUIRE(result.definition);
    return *result.definition;
}
const std::string kSaga =
    "saga: s\nversion: 1\n"
    "input:\n"
    "  amount: {type: decimal, required: true}\n"
    "  count: {type: integer, default: 3}\n"
    "  who: {type: object, required: true, properties: {name: {type: string, required: true}}}\n"
    "  tags: {type: array, items: {type: string}}\n"
    "steps:\n"
    "  - {name: a, participant: p, kind: retriable, command: A, send: {n: $.input.who.name, id: $.sagaId, "
    "lit: '$$.x', r: $.input.tags}}\n";
}  // namespace

TEST_CASE("input validation reports every field error and fills defaults") {
    const auto saga = Load(kSaga);
    json ok = {{"amount", "10.50"}, {"who", {{"name", "Ann"}}}};
    CHECK(sagaflow::ValidateInput(saga, ok).empty());
    CHECK(ok["count"] == 3);

    json bad = {{"amount", 10.5}, {"who", {{"nam", "Ann"}}}, {"tags", {"x", 1}}, {"extra", true}};
    const auto errors = sagaflow::ValidateInput(saga, bad);
    std::vector<std::string> text;
    for (const auto& e : errors) text.push_back(e.path + " " + e.message);
    CHECK(text == std::vector<std::string>{"$.amount must be a decimal number written as a string, e.g. \"10.50\"",
                                           "$.who.name is required",
                                           "$.who.nam is not a field of this saga's input",
                                           "$.tags[1] must be a string",
                                           "$.extra is not a field of this saga's input"});
    json not_object = json::array();
    CHECK(sagaflow::ValidateInput(saga, not_object).size() == 1);
}

TEST_CASE("templates resolve paths, keep literals, and unescape $$.") {
    const auto saga = Load(kSaga);
    const json context = {{"sagaId", "S1"}, {"input", {{"who", {{"name", "Ann"}}}}}, {"steps", json::object()}};
    const json rendered = sagaflow::RenderTemplate(saga.steps[0].action.send, context);
    CHECK(rendered == json{{"n", "Ann"}, {"id", "S1"}, {"lit", "$.x"}, {"r", nullptr}});
}

TEST_CASE("backoff grows exponentially and is capped") {
    sagaflow::RetryPolicy retry;
    retry.initial_backoff = std::chrono::milliseconds(100);
    retry.max_backoff = std::chrono::milliseconds(1000);
    retry.multiplier = 3;
    CHECK(retry.BackoffBefore(1).count() == 0);
    CHECK(retry.BackoffBefore(2).count() == 100);
    CHECK(retry.BackoffBefore(3).count() == 300);
    CHECK(retry.BackoffBefore(4).count() == 900);
    CHECK(retry.BackoffBefore(5).count() == 1000);
}
