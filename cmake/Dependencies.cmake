# Every third-party library comes from a Debian bookworm package. A missing one stops configuration
# with one line naming the package and the fix.
find_package(PkgConfig QUIET)

function(sagaflow_missing what package)
    message(FATAL_ERROR "sagaflow: ${what} not found (Debian package ${package}). Fix: run ./scripts/setup")
endfunction()

if(NOT PKG_CONFIG_FOUND)
    sagaflow_missing("pkg-config" "pkg-config")
endif()
pkg_check_modules(RDKAFKA QUIET IMPORTED_TARGET rdkafka>=2.0)
if(NOT RDKAFKA_FOUND)
    sagaflow_missing("librdkafka >= 2.0" "librdkafka-dev")
endif()
pkg_check_modules(PQXX QUIET IMPORTED_TARGET libpqxx>=6.4)
if(NOT PQXX_FOUND)
    sagaflow_missing("libpqxx >= 6.4" "libpqxx-dev")
endif()
# libpq itself (libpq-dev, which libpqxx-dev pulls in): the tests parse connection strings with it.
pkg_check_modules(PQ QUIET IMPORTED_TARGET libpq)
if(NOT PQ_FOUND)
    sagaflow_missing("libpq" "libpq-dev")
endif()
# fmt (Debian libfmt-dev): type-safe formatting for tables and progress lines.
find_package(fmt QUIET)
if(NOT fmt_FOUND)
    sagaflow_missing("fmt" "libfmt-dev")
endif()

# spdlog (Debian libspdlog-dev): leveled, formatted logging shared by every module.
find_package(spdlog QUIET)
if(NOT spdlog_FOUND)
    sagaflow_missing("spdlog" "libspdlog-dev")
endif()

# CLI11 (Debian libcli11-dev, header-only): subcommands, validated options and help text for free,
# instead of a hand-written argv parser (the CLI and the example services).
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
    sagaflow_missing("CLI11" "libcli11-dev")
endif()

find_package(Boost 1.81 QUIET)
if(NOT Boost_FOUND)
    sagaflow_missing("Boost 1.81" "libboost1.81-dev")
endif()
find_package(yaml-cpp 0.7 QUIET)
if(NOT yaml-cpp_FOUND)
    sagaflow_missing("yaml-cpp 0.7" "libyaml-cpp-dev")
endif()
find_package(nlohmann_json 3.11 QUIET)
if(NOT nlohmann_json_FOUND)
    sagaflow_missing("nlohmann_json 3.11" "nlohmann-json3-dev")
endif()
find_package(OpenSSL 3 QUIET)
if(NOT OpenSSL_FOUND)
    sagaflow_missing("OpenSSL 3 (SHA-256 for definition and request hashes)" "libssl-dev")
endif()
find_package(doctest QUIET)
if(NOT doctest_FOUND)
    sagaflow_missing("doctest" "doctest-dev")
endif()
find_package(Threads REQUIRED)
