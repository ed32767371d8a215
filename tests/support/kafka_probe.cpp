// Exits 0 once the broker at argv[1] answers a metadata request with at least one broker; used by
// scripts/kafka/run to decide that a freshly started broker is ready.
#include <librdkafka/rdkafka.h>

#include <cstdio>
#include <exception>

#include "outbox/detail/rdkafka.hpp"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: sagaflow_kafka_probe HOST:PORT\n");
        return 2;
    }
    try {
        using namespace sagaflow::outbox::detail;
        auto client = MakeClient(RD_KAFKA_PRODUCER, MakeConf({{"bootstrap.servers", argv[1]}, {"log_level", "0"}}));
        const rd_kafka_metadata_t* metadata = nullptr;
        if (rd_kafka_metadata(client.get(), 0, nullptr, &metadata, 2000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            return 1;
        }
        const int brokers = metadata->broker_cnt;
        rd_kafka_metadata_destroy(metadata);
        return brokers > 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
