#pragma once
// A small HTTP/1.1 client for the tests (Boost.Beast, blocking), and a raw socket for requests no
// well-behaved client would send.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace sagaflow::testing {

struct HttpResult {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;

    nlohmann::json Json() const { return nlohmann::json::parse(body); }
    std::string Header(const std::string& lower_name) const {
        const auto it = headers.find(lower_name);
        return it == headers.end() ? std::string() : it->second;
    }
};

HttpResult HttpRequest(int port,
                       const std::string& method,
                       const std::string& target,
                       const std::map<std::string, std::string>& headers = {},
                       const std::string& body = {});

// Writes `bytes` as they are (then half-closes the socket when `close_after` is set) and returns
// what the server answers, parsed; status 0 if it answered nothing.
HttpResult RawRequest(int port, const std::string& bytes, bool close_after = false);

}  // namespace sagaflow::testing
