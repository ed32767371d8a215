#include "tests/support/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>

namespace sagaflow::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

HttpResult ReadResponse(tcp::socket& socket) {
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    beast::error_code ec;
    http::read(socket, buffer, parser, ec);
    HttpResult result;
    if (ec) return result;
    const auto& res = parser.get();
    result.status = static_cast<int>(res.result_int());
    for (const auto& field : res) {
        std::string name(field.name_string());
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        result.headers[name] = std::string(field.value());
    }
    result.body = res.body();
    return result;
}

tcp::socket Connect(asio::io_context& io, int port) {
    tcp::socket socket{io};
    socket.connect(tcp::endpoint{asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    return socket;
}

}  // namespace

HttpResult HttpRequest(int port,
                       const std::string& method,
                       const std::string& target,
                       const std::map<std::string, std::string>& headers,
                       const std::string& body) {
    asio::io_context io;
    auto socket = Connect(io, port);
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    beast::error_code write_error;  // a server may answer (413) and close before the body is sent
    http::write(socket, req, write_error);
    auto result = ReadResponse(socket);
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    return result;
}

HttpResult RawRequest(int port, const std::string& bytes, bool close_after) {
    asio::io_context io;
    auto socket = Connect(io, port);
    beast::error_code ec;  // the server may answer (431, 413) and close before everything is sent
    asio::write(socket, asio::buffer(bytes), ec);
    if (close_after) socket.shutdown(tcp::socket::shutdown_send, ec);
    return ReadResponse(socket);
}

}  // namespace sagaflow::testing
