#include "outbox/membership.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace sagaflow::outbox {

void ApplyGroupDefaults(KafkaProperties& properties) {
    properties.try_emplace("partition.assignment.strategy", "cooperative-sticky");
    properties.try_emplace("session.timeout.ms", kDefaultSessionTimeoutMs);
    properties.try_emplace("heartbeat.interval.ms", "2000");
    properties.try_emplace("reconnect.backoff.max.ms", "1000");
}

namespace {

std::string HostName() {
    std::array<char, 256> name{};
    if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "host";
    return name.data();
}

// A file name for the group: letters, digits, '-', '_' and '.' kept, anything else '_'.
std::string FileSafe(const std::string& group) {
    std::string out;
    for (const char c : group) {
        out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
    }
    return out;
}

}  // namespace

std::unique_ptr<InstanceSlot> InstanceSlot::Claim(const std::string& group) {
    const std::string host = HostName();
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path dir = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / "sagaflow-members";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    // Every user of the host may claim slots here (as /tmp itself).
    std::filesystem::permissions(dir, std::filesystem::perms::all | std::filesystem::perms::sticky_bit, ec);
    for (int slot = 0; slot < 1024; ++slot) {
        const auto path = dir / (FileSafe(group) + "." + std::to_string(slot) + ".lock");
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) break;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            return std::unique_ptr<InstanceSlot>(new InstanceSlot(host + "-" + std::to_string(slot), fd));
        }
        ::close(fd);
    }
    // No slot file can be created: still unique (the pid), though not stable across restarts.
    const std::string id = host + "-pid" + std::to_string(::getpid());
    spdlog::warn(
        "consumer {}: cannot claim an instance slot under {}; joining as {} (a restart will not get its "
        "partitions back at once). Hint: make the directory writable, or set group.instance.id",
        group,
        dir.string(),
        id);
    return std::unique_ptr<InstanceSlot>(new InstanceSlot(id, -1));
}

InstanceSlot::~InstanceSlot() {
    if (fd_ >= 0) ::close(fd_);
}

}  // namespace sagaflow::outbox
