#include "outbox/runtime.hpp"

#include <pqxx/pqxx>

#include "store/inbox.hpp"
#include "store/prepared.hpp"

namespace sagaflow::outbox {

void Runtime::StartPool(const std::string& url, int size) {
    store::PoolOptions options;
    options.url = url;
    options.size = size;
    options.on_connect = [wake = local_wake](pqxx::connection& conn) {
        store::ForgetForeignStatements(conn);  // a new connection, perhaps at an old one's address
        store::UseOwnStatementPlans(conn);
        store::PrepareInbox(conn);
        pqxx::nontransaction{conn}.exec(wake->SessionSetting());
    };
    options.on_disconnect = [](pqxx::connection& conn) { store::ForgetForeignStatements(conn); };
    options.after_job = [wake = local_wake] { wake->Poke(); };
    pool = std::make_unique<store::ConnectionPool>(options);
}

void Runtime::StartRelay(const std::string& url, const std::string& brokers, const KafkaProperties& properties) {
    RelayOptions options;
    options.db_url = url;
    options.brokers = brokers;
    options.properties = properties;
    options.local_wake = local_wake;
    relay = std::make_unique<Relay>(options);
    relay->Start();
}

void Runtime::StartConsumer(ConsumerOptions options, BatchHandler handler) {
    consumer = std::make_unique<Consumer>(*pool, std::move(options), std::move(handler));
    consumer->Start();
}

void Runtime::StartSweeper(std::chrono::hours ttl, store::Sweeper::Extra extra) {
    sweeper = std::make_unique<store::Sweeper>(*pool, ttl, std::chrono::hours(24), std::move(extra));
    sweeper->Start();
}

void Runtime::BeginStop() {
    if (consumer) consumer->BeginStop();  // first: a record failed by the stopping pool is not a poison record
    if (pool) pool->BeginStop();
}

void Runtime::Stop() {
    BeginStop();
    if (sweeper) sweeper->Stop();
    if (consumer) consumer->Stop();
    if (relay) relay->Stop();
    if (pool) pool->Stop();
    sweeper.reset();
    consumer.reset();
    relay.reset();
    pool.reset();
}

}  // namespace sagaflow::outbox
