// The order service of the sample saga: creates, cancels and approves orders in its own schema.
// Every handler is idempotent on its own too (ON CONFLICT, guarded updates), but it does not need
// to be: the participant runs it at most once per (saga, step, phase).
#include "examples/order-payment/service.hpp"

int main(int argc, char** argv) {
    CLI::App app{"sagaflow example: the order service (participant 'order')"};
    example::LogToStderr();
    example::ServiceFlags flags;
    example::AddServiceFlags(app, flags, "order", "orders");
    CLI11_PARSE(app, argc, argv);

    sagaflow::Participant participant{example::ConfigFrom(app, flags)};
    participant.Setup([](sagaflow::Transaction& tx) {
        tx.Execute(
            "CREATE TABLE IF NOT EXISTS orders ("
            "  order_id     text          PRIMARY KEY,"
            "  saga_id      uuid          NOT NULL,"
            "  customer_id  bigint        NOT NULL,"
            "  amount       numeric(12,2) NOT NULL,"
            "  currency     text          NOT NULL,"
            "  status       text          NOT NULL CHECK (status IN ('pending', 'approved', 'cancelled')),"
            "  payment_id   text          NULL,"
            "  updated_at   timestamptz   NOT NULL DEFAULT now())");
    });
    participant.OnAction("CreateOrder.v1", [](sagaflow::Transaction& tx, const sagaflow::Command& c) {
        const auto& d = c.data;
        tx.Execute(
            "INSERT INTO orders (order_id, saga_id, customer_id, amount, currency, status) "
            "VALUES ($1, $2::uuid, $3::bigint, $4::numeric, $5, 'pending') ON CONFLICT (order_id) DO NOTHING",
            {d.value("orderId", ""),
             c.saga_id,
             std::to_string(d.value("customerId", 0LL)),
             d.value("amount", "0"),
             d.value("currency", "EUR")});
        return sagaflow::StepReply::Success({{"orderId", d.value("orderId", "")}});
    });
    participant.OnCompensation("CancelOrder.v1", [](sagaflow::Transaction& tx, const sagaflow::Command& c) {
        tx.Execute(
            "UPDATE orders SET status = 'cancelled', updated_at = now() WHERE order_id = $1 AND status = "
            "'pending'",
            {c.data.value("orderId", "")});
        return sagaflow::StepReply::Success();
    });
    participant.OnAction("ApproveOrder.v1", [](sagaflow::Transaction& tx, const sagaflow::Command& c) {
        const auto updated = tx.Execute(
            "UPDATE orders SET status = 'approved', payment_id = $2, updated_at = now() WHERE order_id = $1 AND "
            "status <> 'cancelled'",
            {c.data.value("orderId", ""),
             c.data.contains("paymentId") && c.data.at("paymentId").is_string()
                 ? std::optional(c.data.at("paymentId").get<std::string>())
                 : std::nullopt});
        if (updated == 0) return sagaflow::StepReply::Retry("order not found yet");
        return sagaflow::StepReply::Success();
    });
    return example::RunUntilSignalled(participant, "order-service");
}
