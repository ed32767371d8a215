// The bounded JSON reader (core/bounded_json.hpp) against nlohmann's plain parse, on what sagaflow
// reads on a saga's path: a participant's reply as it arrives (a structured CloudEvent), a command
// as a participant reads it, and an HTTP start body; and what a hostile body 100,000 levels deep
// costs to refuse. Prints ns per read for both and the ratio, measured alternately in one run.
//   build/release/bench/json_read_bench [ROUNDS]     (default 200000 reads per text and side)
// For exact counts, run it under valgrind --tool=callgrind with a small ROUNDS (bench/README.md).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/bounded_json.hpp"
#include "core/definition.hpp"
#include "core/definition_loader.hpp"

namespace {

double NsPer(int rounds, const std::string& text, bool bounded) {
    std::size_t sink = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) {
        if (bounded) {
            sagaflow::JsonRefusal refusal;
            const auto value = sagaflow::ReadJson(text, refusal);
            sink += value ? value->size() : refusal.message.size();
        } else {
            sink += nlohmann::json::parse(text, nullptr, false).size();
        }
    }
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (sink == 42) std::puts("");  // keeps the reads from being optimised away
    return ns / rounds;
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 200'000;
    const std::vector<std::pair<const char*, std::string>> texts{
        {"reply record",
         R"({"specversion":"1.0","id":"0190a5a8-7c3e-7000-8000-000000000001","type":"ChargePayment.v1.reply",)"
         R"("source":"sagaflow-participant/payment","time":"2026-12-07T10:00:00.000Z","datacontenttype":)"
         R"("application/json","sagaid":"0190a5a8-7c3e-7000-8000-000000000002","stepname":"charge-payment",)"
         R"("phase":"action","correlationid":"0190a5a8-7c3e-7000-8000-000000000003","traceparent":)"
         R"("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","data":{"outcome":"success",)"
         R"("paymentId":"6f1c2a10-5b1e-4d8a-9a43-2c1d9e7f0b11"}})"},
        {"command record",
         R"({"specversion":"1.0","id":"0190a5a8-7c3e-7000-8000-000000000003","type":"ChargePayment.v1",)"
         R"("source":"sagaflow/engine-1","time":"2026-12-07T10:00:00.000Z","datacontenttype":"application/json",)"
         R"("sagaid":"0190a5a8-7c3e-7000-8000-000000000002","stepname":"charge-payment","phase":"action",)"
         R"("data":{"orderId":"o-1","customerId":7,"amount":"10.50","currency":"EUR","items":["a","b","c"]}})"},
        {"start body", R"({"orderId":"o-1","customerId":7,"amount":"10.50","currency":"EUR","items":["a","b","c"]})"},
        {"hostile body", std::string(100'000, '[') + std::string(100'000, ']')},
    };
    std::printf("%-15s %8s %12s %12s %7s\n", "text", "bytes", "plain ns", "bounded ns", "ratio");
    for (const auto& [name, text] : texts) {
        double plain = 0, bounded = 0;
        for (int pass = 0; pass < 4; ++pass) {  // alternately, so drift hits both sides alike
            const int n = text.size() > 10'000 ? std::max(1, rounds / 1000) : rounds;
            (pass % 2 == 0 ? plain : bounded) += NsPer(n, text, pass % 2 == 1);
        }
        std::printf("%-15s %8zu %12.0f %12.0f %7.2f\n", name, text.size(), plain / 2, bounded / 2, bounded / plain);
    }
    // A start's other new check: every step's command rendered and sized (CheckCommandSizes), on
    // the sample saga (SAGAFLOW_SOURCE_DIR, or the current folder).
    const char* source = std::getenv("SAGAFLOW_SOURCE_DIR");
    const auto saga =
        sagaflow::LoadDefinitionOrThrow(std::string(source != nullptr ? source : ".") + "/sagas/order-payment.yaml");
    nlohmann::json input = nlohmann::json::parse(texts[2].second);
    const auto start = std::chrono::steady_clock::now();
    std::size_t errors = 0;
    for (int i = 0; i < rounds; ++i) errors += sagaflow::CheckCommandSizes(saga, input, 1'000'000).size();
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    std::printf("command sizes of order-payment's %zu steps at a start: %.0f ns (%zu errors)\n",
                saga.steps.size(),
                ns / rounds,
                errors);
}
