// The loader's errors are its user interface: every class of error is checked here with its exact
// text and position.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/definition_loader.hpp"
#include "tests/support/print.hpp"

using sagaflow::LoadDefinitionString;
using sagaflow::StepKind;

namespace {

std::vector<std::string> Errors(const std::string& yaml) {
    std::vector<std::string> out;
    for (const auto& d : LoadDefinitionString(yaml, "t.yaml").diagnostics) {
        out.push_back(d.ToString());
    }
    return out;
}

const std::string kHead = "saga: s\nversion: 1\n";
const std::string kStepA =
    "  - name: a\n"
    "    participant: p\n"
    "    kind: compensatable\n"
    "    command: DoA.v1\n"
    "    compensation: UndoA.v1\n";

using Lines = std::vector<std::string>;

}  // namespace

TEST_CASE("a valid definition loads into the typed model with defaults resolved") {
    const auto result = LoadDefinitionString(kHead +
                                                 "input:\n"
                                                 "  amount: {type: decimal, required: true}\n"
                                                 "  note: {type: string, default: none}\n"
                                                 "defaults: {timeout: 5s, retry: {maxAttempts: 4}}\n"
                                                 "steps:\n" +
                                                 kStepA +
                                                 "    send: {amount: $.input.amount, fixed: 7, id: $.sagaId}\n"
                                                 "    save: {ref: $.reply.ref}\n"
                                                 "  - {name: b, participant: q, kind: pivot, command: DoB}\n"
                                                 "  - {name: c, participant: q, kind: retriable, command: DoC, "
                                                 "send: {ref: $.data.ref}, timeout: 250ms}\n",
                                             "t.yaml");
    REQUIRE(result.diagnostics.empty());
    const auto& saga = *result.definition;
    CHECK(saga.name == "s");
    CHECK(saga.steps.size() == 3);
    CHECK(saga.steps[0].kind == StepKind::kCompensatable);
    CHECK(saga.steps[0].CommandTopic() == "p.commands");
    CHECK(saga.steps[0].compensation->type == "UndoA.v1");
    CHECK(saga.steps[0].compensation->send == saga.steps[0].action.send);  // reuses the action's fields
    CHECK(saga.steps[0].action.send["fixed"] == 7);
    CHECK(saga.steps[0].timeout == std::chrono::seconds(5));
    CHECK(saga.steps[0].retry.max_attempts == 4);
    CHECK(saga.steps[2].timeout == std::chrono::milliseconds(250));
    CHECK(saga.PivotIndex() == 1u);
    CHECK(saga.hash.size() == 64);
}

TEST_CASE("YAML syntax errors name the position") {
    CHECK(Errors(kHead + "steps:\n  - name: a\n    participant: [x, ") ==
          Lines{"t.yaml:5:1: error: YAML syntax: end of sequence flow not found"});
    CHECK(Errors(kHead + "steps:\n\t- name: a\n") ==
          Lines{"t.yaml:4:2: error: YAML syntax: illegal block entry (YAML does not allow tabs for indentation: use "
                "spaces)"});
}

TEST_CASE("unknown keys are refused with a suggestion and the allowed keys") {
    CHECK(Errors(kHead + "stepz:\n" + kStepA) ==
          Lines{"t.yaml:1:1: error: missing required key 'steps'",
                "t.yaml:3:1: error: stepz: unknown key 'stepz' (did you mean 'steps'?); allowed here: saga, version, "
                "description, input, defaults, deadline, steps"});
    const auto errors = Errors(kHead + "steps:\n" + kStepA + "    timout: 5s\n");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          "t.yaml:9:5: error: steps[0].timout: unknown key 'timout' (did you mean 'timeout'?); allowed here: name, "
          "participant, command, compensation, kind, after, when, send, save, timeout, startTimeout, retry");
}

TEST_CASE("wrong types name what was expected and what was found") {
    CHECK(Errors(kHead + "steps: {a: 1}\n") ==
          Lines{"t.yaml:3:8: error: steps: expected a list of steps, found a mapping"});
    CHECK(Errors("saga: s\nversion: one\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:2:10: error: version: expected an integer, found 'one'"});
    CHECK(Errors("- saga: x\n") == Lines{"t.yaml:1:1: error: expected a mapping of keys, found a list"});
    CHECK(Errors(kHead + "steps:\n  - name:\n    participant: p\n    kind: retriable\n    command: C\n") ==
          Lines{"t.yaml:4:5: error: steps[0].name: expected a string, found no value"});
}

TEST_CASE("missing keys, empty files, several documents") {
    CHECK(Errors("description: x\n") == Lines{"t.yaml:1:1: error: missing required key 'saga'",
                                              "t.yaml:1:1: error: missing required key 'version'",
                                              "t.yaml:1:1: error: missing required key 'steps'"});
    CHECK(Errors("") == Lines{"t.yaml: error: the file is empty: a saga definition needs at least 'saga' and 'steps'"});
    CHECK(
        Errors(kHead + "steps:\n" + kStepA + "---\nsaga: b\n") ==
        Lines{"t.yaml:9:1: error: more than one YAML document, or text after the first one ends: put one saga in each "
              "file"});
}

TEST_CASE("duplicate keys, duplicate step names and an empty step list") {
    CHECK(
        Errors(kHead + "steps:\n  - name: a\n    name: b\n    participant: p\n    kind: retriable\n    command: C\n") ==
        Lines{"t.yaml:5:5: error: steps[0].name: duplicate key 'name' (first at line 4)"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + kStepA) ==
          Lines{"t.yaml:9:5: error: steps[1].name: duplicate step name 'a' (also steps[0])"});
    CHECK(Errors(kHead + "steps: []\n") ==
          Lines{"t.yaml:3:8: error: steps: the step list is empty: a saga needs at least one step"});
}

TEST_CASE("names must be safe for URLs and topics") {
    CHECK(Errors("saga: Order_Payment\nversion: 1\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:1:7: error: saga: 'Order_Payment' is not a valid name: lowercase letters, digits and '-', "
                "starting with a letter (it appears in URLs)"});
}

TEST_CASE("durations and retry values out of range") {
    CHECK(Errors(kHead + "defaults: {timeout: 30}\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:3:21: error: defaults.timeout: invalid duration '30': write a whole number with a unit ms, s, "
                "m or h (e.g. 30s, 500ms)"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + "    timeout: 48h\n") ==
          Lines{"t.yaml:9:14: error: steps[0].timeout: duration 48h is out of range: allowed 100ms to 24h"});
    CHECK(Errors(kHead + "defaults:\n  retry: {maxAttempts: 0, jitter: 1.5, backoff: {multiplier: 50}}\nsteps:\n" +
                 kStepA) ==
          Lines{"t.yaml:4:24: error: defaults.retry.maxAttempts: 0 is out of range: allowed 1 to 1000",
                "t.yaml:4:35: error: defaults.retry.jitter: '1.5' is out of range: allowed 0 to 1",
                "t.yaml:4:62: error: defaults.retry.backoff.multiplier: '50' is out of range: allowed 1 to 10"});
    CHECK(Errors(kHead + "defaults:\n  retry: {backoff: {initial: 10s, max: 1s}}\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:4:20: error: defaults.retry.backoff: max (1s) is smaller than initial (10s)"});
}

TEST_CASE("input schema errors") {
    CHECK(Errors(kHead + "input:\n  amount: {type: money}\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:4:18: error: input.amount.type: unknown type 'money'; allowed: string, integer, decimal, "
                "boolean, object, array"});
    CHECK(Errors(kHead + "input:\n  count: {type: integer, default: abc}\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:4:35: error: input.count.default: the default does not fit the field's type: it must be an "
                "integer"});
    CHECK(Errors(kHead + "input:\n  c: {type: string, required: true, default: x}\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:4:37: error: input.c.default: a required field cannot have a default: drop 'required: true' "
                "or the default"});
}

TEST_CASE("references in send and save") {
    CHECK(Errors(kHead + "input:\n  amount: {type: decimal}\nsteps:\n" + kStepA +
                 "    send: {amount: $.input.amout}\n") ==
          Lines{"t.yaml:11:20: error: steps[0].send.amount: '$.input.amout' refers to unknown input field 'amout' "
                "(did you mean 'amount'?)"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + "    send: {x: $.steps.b.reply.id}\n" +
                 "  - {name: b, participant: p, kind: retriable, command: DoB.v1}\n") ==
          Lines{"t.yaml:9:15: error: steps[0].send.x: '$.steps.b.reply.id' refers to step 'b', which has not run yet "
                "when step 'a' sends its command"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + "    send: {x: $.steps.zz.reply.id}\n") ==
          Lines{"t.yaml:9:15: error: steps[0].send.x: '$.steps.zz.reply.id' refers to unknown step 'zz'"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + "    send: {x: $.data.paymentId}\n") ==
          Lines{"t.yaml:9:15: error: steps[0].send.x: '$.data.paymentId' refers to data key 'paymentId' that no "
                "earlier step saves"});
    CHECK(Errors(kHead + "steps:\n" + kStepA + "    send: {x: $.foo.bar}\n") ==
          Lines{"t.yaml:9:15: error: steps[0].send.x: '$.foo.bar' starts with unknown root 'foo'; paths start with "
                "$.sagaId, $.input, $.data or $.steps"});
    CHECK(Errors(kHead + "input: {a: {type: string}}\nsteps:\n" + kStepA + "    save: {x: $.input.a}\n") ==
          Lines{"t.yaml:10:15: error: steps[0].save.x: expected a path into this step's reply, such as "
                "$.reply.paymentId"});
    // A compensation may read its own step's reply and what its step saved.
    CHECK(Errors(kHead + "steps:\n  - name: a\n    participant: p\n    kind: compensatable\n    command: DoA\n" +
                 "    save: {ref: $.reply.ref}\n" +
                 "    compensation: {command: UndoA, send: {r: $.data.ref, h: $.steps.a.reply.hold}}\n")
              .empty());
}

TEST_CASE("static safety: compensatable, then at most one pivot, then retriable") {
    const std::string p = "  - {name: p, participant: x, kind: pivot, command: P}\n";
    const std::string r = "  - {name: r, participant: x, kind: retriable, command: R}\n";
    const std::string c = "  - {name: c, participant: x, kind: compensatable, command: C, compensation: U}\n";
    CHECK(Errors(kHead + "steps:\n  - {name: a, participant: x, kind: compensatable, command: A}\n") ==
          Lines{"t.yaml:4:5: error: steps[0]: step 'a' is compensatable but has no compensation: add "
                "'compensation:', or make it the pivot if it is the point of no return."});
    CHECK(Errors(kHead + "steps:\n" + p + "  - {name: q, participant: x, kind: pivot, command: Q}\n") ==
          Lines{"t.yaml:5:5: error: steps[1]: step 'q' is a second pivot after 'p': a saga has at most one pivot."});
    CHECK(Errors(kHead + "steps:\n" + p + c) ==
          Lines{"t.yaml:5:5: error: steps[1]: step 'c' comes after the pivot 'p' but is not retriable: after the "
                "point of no return every step must be retried until it succeeds."});
    CHECK(Errors(kHead + "steps:\n" + r + c) ==
          Lines{"t.yaml:5:5: error: steps[1]: step 'c' is compensatable but comes after retriable step 'r': once a "
                "retriable step has run the saga cannot be undone."});
    CHECK(Errors(kHead + "steps:\n" + r + p) ==
          Lines{"t.yaml:5:5: error: steps[1]: step 'p' is the pivot but comes after retriable step 'r': every step "
                "before the pivot must be compensatable."});
    CHECK(Errors(kHead + "steps:\n  - {name: p, participant: x, kind: pivot, command: P, compensation: U}\n") ==
          Lines{"t.yaml:4:5: error: steps[0]: step 'p' is the pivot, the point of no return, so it cannot have a "
                "compensation: remove 'compensation:' or make it compensatable."});
    CHECK(Errors(kHead + "steps:\n  - {name: r, participant: x, kind: retriable, command: R, compensation: U}\n") ==
          Lines{"t.yaml:4:5: error: steps[0]: step 'r' is retriable and is never compensated (it runs after the point "
                "of no return): remove 'compensation:'."});
    CHECK(Errors(kHead + "steps:\n  - {name: a, participant: x, kind: compensable, command: A, compensation: U}\n") ==
          Lines{"t.yaml:4:37: error: steps[0].kind: unknown kind 'compensable' (did you mean 'compensatable'?); "
                "allowed: compensatable, pivot, retriable"});
    CHECK(Errors(kHead + "steps:\n" + c + p + r).empty());
    CHECK(Errors(kHead + "steps:\n" + c + r).empty());
}

TEST_CASE("every error is reported at once, in file order") {
    const auto errors = Errors(
        "saga: Bad\nversion: 0\nsteps:\n  - {name: a, participant: x, kind: pivot, command: "
        "A, timeout: 1}\n  - {name: b, participant: x, kind: compensatable, command: B}\n");
    CHECK(errors == Lines{"t.yaml:1:7: error: saga: 'Bad' is not a valid name: lowercase letters, digits and '-', "
                          "starting with a letter (it appears in URLs)",
                          "t.yaml:2:10: error: version: 0 is out of range: allowed 1 to 1000000",
                          "t.yaml:4:65: error: steps[0].timeout: invalid duration '1': write a whole number with a "
                          "unit ms, s, m or h (e.g. 30s, 500ms)",
                          "t.yaml:5:5: error: steps[1]: step 'b' is compensatable but has no compensation: add "
                          "'compensation:', or make it the pivot if it is the point of no return.",
                          "t.yaml:5:5: error: steps[1]: step 'b' comes after the pivot 'a' but is not retriable: after "
                          "the point of no return every step must be retried until it succeeds."});
}

TEST_CASE("hostile input: size, encoding, nesting, aliases") {
    CHECK(Errors(std::string(sagaflow::kMaxDefinitionBytes + 1, '#')) ==
          Lines{"t.yaml: error: the file is 1048577 bytes; a saga definition may be at most 1048576 bytes. Hint: is "
                "this the right file?"});
    CHECK(Errors("saga: caf\xc3\n") ==
          Lines{"t.yaml:1:10: error: invalid UTF-8 byte sequence: save the file as UTF-8"});
    CHECK(Errors(std::string("saga: x\0y", 9)) ==
          Lines{"t.yaml:1:8: error: a NUL byte: this looks like a binary file, not YAML"});
    CHECK(Errors("steps: " + std::string(5000, '[') + std::string(5000, ']')) ==
          Lines{"t.yaml:1:10008: error: the document is nested more than 500 levels deep; a saga definition needs a "
                "handful"});
    std::string laughs = kHead + "steps:\n" + kStepA + "    send:\n      a: &a [x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'h'; ++c) {
        laughs += std::string("      ") + c + ": &" + c + " [";
        for (int i = 0; i < 8; ++i) laughs += std::string(i ? ", *" : "*") + static_cast<char>(c - 1);
        laughs += "]\n";
    }
    const auto errors = Errors(laughs);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("value too large: more than 4096 nodes") != std::string::npos);
}

TEST_CASE("the canonical hash ignores layout but not meaning") {
    const auto a = LoadDefinitionString(kHead + "steps:\n" + kStepA, "a.yaml");
    const auto b = LoadDefinitionString(
        "version: 1\nsaga: s\n# comment\nsteps: [{command: DoA.v1, name: a, kind: compensatable, participant: p, "
        "compensation: UndoA.v1, timeout: 30s}]\n",
        "b.yaml");
    const auto c = LoadDefinitionString(kHead + "steps:\n" + kStepA + "    timeout: 31s\n", "c.yaml");
    REQUIRE(a.definition);
    REQUIRE(b.definition);
    REQUIRE(c.definition);
    CHECK(a.definition->hash == b.definition->hash);
    CHECK(a.definition->hash != c.definition->hash);
}

TEST_CASE("a saga deadline: read, in the hash only when set, refused where it could never cancel") {
    const auto plain = LoadDefinitionString(kHead + "steps:\n" + kStepA, "a.yaml");
    REQUIRE(plain.definition);
    CHECK_FALSE(plain.definition->deadline);
    // The hash a definition without a deadline had before deadlines existed (sagaflow validate on
    // 17ae76c): deployed databases pin their sagas to it.
    CHECK(plain.definition->hash.substr(0, 12) == "c6c1ab7cb23c");
    const auto with = LoadDefinitionString(kHead + "deadline: 15m\nsteps:\n" + kStepA, "b.yaml");
    REQUIRE(with.definition);
    CHECK(with.definition->deadline == std::chrono::minutes(15));
    CHECK(with.definition->Canonical()["deadlineMs"] == 900'000);
    CHECK(with.definition->hash != plain.definition->hash);

    CHECK(Errors(kHead + "deadline: 500ms\nsteps:\n" + kStepA) ==
          Lines{"t.yaml:3:11: error: deadline: duration 500ms is out of range: allowed 1s to 720h"});
    CHECK(Errors(kHead + "deadline: 1h\nsteps:\n  - {name: pay, participant: p, kind: pivot, command: Pay.v1}\n") ==
          Lines{"t.yaml:3:11: error: deadline: the first step 'pay' is pivot: the saga is past its point of no return "
                "from the start, so a deadline could never cancel it. Remove 'deadline:'."});
}

TEST_CASE("startTimeout: per step or from defaults, 10 minutes when unset, in the hash only when set") {
    const auto plain = LoadDefinitionString(kHead + "steps:\n" + kStepA, "a.yaml");
    REQUIRE(plain.definition);
    CHECK_FALSE(plain.definition->steps[0].start_timeout);
    CHECK(plain.definition->steps[0].StartTimeout() == std::chrono::minutes(10));
    CHECK(plain.definition->hash.substr(0, 12) == "c6c1ab7cb23c");  // unchanged by the new key

    const auto step = LoadDefinitionString(kHead + "steps:\n" + kStepA + "    startTimeout: 2m\n", "b.yaml");
    REQUIRE(step.definition);
    CHECK(step.definition->steps[0].StartTimeout() == std::chrono::minutes(2));
    CHECK(step.definition->Canonical()["steps"][0]["startTimeoutMs"] == 120'000);
    CHECK(step.definition->hash != plain.definition->hash);

    const auto defaults = LoadDefinitionString(kHead + "defaults:\n  startTimeout: 30s\nsteps:\n" + kStepA +
                                                   "  - {name: b, participant: p, kind: pivot, "
                                                   "command: B.v1, startTimeout: 1h}\n",
                                               "c.yaml");
    REQUIRE(defaults.definition);
    CHECK(defaults.definition->steps[0].StartTimeout() == std::chrono::seconds(30));
    CHECK(defaults.definition->steps[1].StartTimeout() == std::chrono::hours(1));

    CHECK(Errors(kHead + "steps:\n" + kStepA + "    startTimeout: 500ms\n") ==
          Lines{"t.yaml:9:19: error: steps[0].startTimeout: duration 500ms is out of range: allowed 1s to 168h"});
}
