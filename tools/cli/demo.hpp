#pragma once
// `sagaflow demo`: the sample order-payment saga end to end (scripts/demo starts the PostgreSQL).

#include <string>

namespace sagaflow::cli {

struct DemoOptions {
    std::string db_url;
    std::string kafka;         // empty: an embedded Kafka (librdkafka's mock cluster)
    std::string services_dir;  // where sagaflow-order-service and sagaflow-payment-service are
    std::string saga_file;     // sagas/order-payment.yaml
    int sagas = 40;
    // "cpp": sagaflow-payment-service; "node": the TypeScript one (examples/payment-ts) at
    // `node_service`, its replies published by a `sagaflow relay` from schema payments.
    std::string payment_service = "cpp";
    std::string node_service;
    int http_port = 0;          // the HTTP API and console on 127.0.0.1 (0: any free port)
    bool keep_running = false;  // after the run, keep the engine and services up until Ctrl-C
};

// Runs the scenario, prints progress, the outcomes, one timeline, the money invariant and the
// console's URL (then, with keep_running, waits for SIGINT/SIGTERM). Returns 0 only when the
// invariant holds.
int RunDemo(const DemoOptions& options);

}  // namespace sagaflow::cli
