// The payment service of the sample saga: charges and refunds in its own schema. Money has two
// guards: the participant's step record (one charge per saga step, whatever is redelivered) and the
// table's UNIQUE (payment_provider, external_payment_id), which also catches the same order charged
// by two sagas (a client that retried with a new idempotency key, rule X3): the second saga sees
// the existing payment instead of charging again.
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "examples/order-payment/service.hpp"
#include "store/test_guards.hpp"

int main(int argc, char** argv) {
    CLI::App app{"sagaflow example: the payment service (participant 'payment')"};
    example::LogToStderr();
    example::ServiceFlags flags;
    example::AddServiceFlags(app, flags, "payment", "payments");
    double limit = 500.0;
    std::vector<std::string> slow_orders;
    int slow_ms = 6000;
    app.add_option("--limit", limit, "charges above this amount are declined")->capture_default_str();
    app.add_option("--slow-order",
                   slow_orders,
                   "ORDER[:MS]: the provider stand-in is slow for this order's first charge (MS, else --slow-ms); "
                   "repeatable");
    app.add_option("--slow-ms", slow_ms, "how slow (longer than the step timeout makes the engine resend)")
        ->capture_default_str();
    int slow_every = 0;
    app.add_option("--slow-every", slow_every, "the provider is slow (--slow-ms) on every Nth charge; 0: never")
        ->capture_default_str();
    std::string retry_prefix;
    app.add_option("--retry-orders",
                   retry_prefix,
                   "PREFIX: the provider is unavailable at the first charge of each order whose id starts with it "
                   "(the handler answers Retry; the engine's next attempt charges)");
    CLI11_PARSE(app, argc, argv);
    std::map<std::string, int> slow;  // order -> milliseconds, for its first charge only
    for (const auto& spec : slow_orders) {
        const auto colon = spec.rfind(':');
        try {
            slow[spec.substr(0, colon)] = colon == std::string::npos ? slow_ms : std::stoi(spec.substr(colon + 1));
        } catch (const std::exception&) {
            std::cerr << "--slow-order " << spec << ": MS after the ':' must be a number of milliseconds\n";
            return 2;
        }
    }

    sagaflow::Participant participant{example::ConfigFrom(app, flags)};
    // TEST ONLY (issue 9): without the UNIQUE, the audit must find the double charge.
    const bool unique = !sagaflow::store::GuardDisabled("payment-unique");
    participant.Setup([unique](sagaflow::Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS payment ("
            "  payment_id           uuid          PRIMARY KEY DEFAULT gen_random_uuid(),"
            "  saga_id              uuid          NOT NULL,"
            "  order_id             text          NOT NULL,"
            "  customer_id          bigint        NOT NULL,"
            "  amount               numeric(12,2) NOT NULL,"
            "  currency             text          NOT NULL,"
            "  payment_provider     text          NOT NULL,"
            "  external_payment_id  text          NOT NULL,"
            "  status               text          NOT NULL CHECK (status IN ('charged', 'refunded')),"
            "  created_at           timestamptz   NOT NULL DEFAULT now()" +
            std::string(unique ? ", UNIQUE (payment_provider, external_payment_id))" : ")"));
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS refund ("
            "  payment_id   uuid        PRIMARY KEY REFERENCES payment (payment_id),"
            "  saga_id      uuid        NOT NULL,"
            "  refunded_at  timestamptz NOT NULL DEFAULT now())");
    });
    int charges = 0;                         // the consumer thread runs the handlers one at a time
    std::set<std::string> unavailable_once;  // orders answered Retry already
    participant.OnAction("ChargePayment.v1", [&](sagaflow::Transaction& tx, const sagaflow::Command& c) {
        const auto& d = c.data;
        const std::string order_id = d.value("orderId", "");
        const std::string amount = d.value("amount", "0");
        const bool every = slow_every > 0 && ++charges % slow_every == 0;
        if (const auto it = slow.find(order_id); it != slow.end()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(it->second));  // the provider is slow
            slow.erase(it);
        } else if (every) {
            std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
        }
        if (!retry_prefix.empty() && order_id.rfind(retry_prefix, 0) == 0 && unavailable_once.insert(order_id).second) {
            return sagaflow::StepReply::Retry("the payment provider is unavailable");
        }
        if (std::stod(amount) > limit) {
            return sagaflow::StepReply::Failure("declined: " + amount + " is over the customer's limit");
        }
        const std::string provider = d.value("paymentProvider", "stub-pay");
        const std::string external_id = d.value("externalPaymentId", order_id);
        auto rows = tx.Query(
            "INSERT INTO payment (saga_id, order_id, customer_id, amount, currency, payment_provider, "
            "external_payment_id, status) VALUES ($1::uuid, $2, $3::bigint, $4::numeric, $5, $6, $7, 'charged') "
            "ON CONFLICT DO NOTHING RETURNING payment_id::text",
            {c.saga_id,
             order_id,
             std::to_string(d.value("customerId", 0LL)),
             amount,
             d.value("currency", "EUR"),
             provider,
             external_id});
        if (!rows.empty()) return sagaflow::StepReply::Success({{"paymentId", *rows[0][0]}});
        // The UNIQUE constraint caught a second charge of the same payment: observe the first.
        rows = tx.Query("SELECT payment_id::text FROM payment WHERE payment_provider = $1 AND external_payment_id = $2",
                        {provider, external_id});
        return sagaflow::StepReply::Success({{"paymentId", *rows.at(0)[0]}, {"existing", true}});
    });
    participant.OnCompensation("RefundPayment.v1", [](sagaflow::Transaction& tx, const sagaflow::Command& c) {
        // paymentId is null when the charge's outcome was unknown to the engine: find it by saga.
        const auto rows = tx.Query(
            "SELECT payment_id::text FROM payment WHERE (payment_id::text = $1 OR ($1 IS NULL AND saga_id = "
            "$2::uuid)) AND saga_id = $2::uuid",
            {c.data.contains("paymentId") && c.data.at("paymentId").is_string()
                 ? std::optional(c.data.at("paymentId").get<std::string>())
                 : std::nullopt,
             c.saga_id});
        for (const auto& row : rows) {
            tx.Execute("INSERT INTO refund (payment_id, saga_id) VALUES ($1::uuid, $2::uuid) ON CONFLICT DO NOTHING",
                       {*row[0], c.saga_id});
            tx.Execute("UPDATE payment SET status = 'refunded' WHERE payment_id = $1::uuid", {*row[0]});
        }
        return sagaflow::StepReply::Success({{"refunded", rows.size()}});
    });
    return example::RunUntilSignalled(participant, "payment-service");
}
