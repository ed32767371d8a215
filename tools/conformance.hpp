#pragma once
// The conformance kit: plays the engine against a running participant of any language, over a real
// broker, and checks each rule of docs/protocol.md that can be seen from the outside. `sagaflow
// conformance` prints one line per check and exits 1 if any failed.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sagaflow {

struct ConformanceOptions {
    std::string brokers;
    std::map<std::string, std::string> kafka_properties;
    std::string participant;        // reads <participant>.commands
    std::string action_type;        // e.g. ChargePayment.v1
    std::string compensation_type;  // e.g. RefundPayment.v1
    std::string replies_topic = "sagaflow.replies";
    // The data of an action the participant applies with success, and of its compensation, as JSON;
    // "{saga}" anywhere in them is replaced by the check's saga id (so each check is a new order).
    std::string action_data =
        R"({"orderId": "conformance-{saga}", "externalPaymentId": "conformance-{saga}", "customerId": 1, )"
        R"("amount": "1.00", "currency": "EUR"})";
    std::string compensation_data = R"({"orderId": "conformance-{saga}"})";
    // An action the participant answers `retry` at first and `success` on the resend; empty: the
    // retry check is skipped.
    std::string retry_data;
    std::chrono::seconds timeout{30};  // how long each check waits for an answer
};

struct ConformanceCheck {
    std::string name;
    enum class Result { kPassed, kFailed, kSkipped } result = Result::kPassed;
    std::string detail;
};

struct ConformanceReport {
    std::vector<ConformanceCheck> checks;
    int Count(ConformanceCheck::Result result) const;
};

// Runs every check in turn; `on_check` sees each as it ends (progress). Throws outbox::KafkaError
// when the broker cannot be used at all.
ConformanceReport RunConformance(const ConformanceOptions& options,
                                 const std::function<void(const ConformanceCheck&)>& on_check = {});

}  // namespace sagaflow
