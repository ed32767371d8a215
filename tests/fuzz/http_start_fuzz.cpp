// libFuzzer target over an HTTP start as the server reads it: the request parsed by Beast (headers,
// body within the limits), the media type, the body read as a bounded JSON object, checked against
// the sample saga's input schema, and its commands sized. Any bytes in, an answer out: never a
// crash, a hang, or undefined behaviour (built with ASan + UBSan by scripts/fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/definition.hpp"
#include "core/definition_loader.hpp"
#include "engine/http/request_body.hpp"

namespace {

const sagaflow::SagaDefinition& Saga() {
    static const auto definition = sagaflow::LoadDefinitionOrThrow(SAGAFLOW_SOURCE_DIR "/sagas/order-payment.yaml");
    return definition;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace http = boost::beast::http;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 << 10);
    parser.body_limit(1 << 20);
    parser.eager(true);
    boost::system::error_code ec;
    parser.put(boost::asio::buffer(data, size), ec);
    if (!ec && !parser.is_done()) parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
    const auto& request = parser.get();
    if (request.count("Idempotency-Key") > 1) return 0;
    static_cast<void>(sagaflow::detail::IsJsonContentType(request[http::field::content_type]));
    nlohmann::json body;
    if (sagaflow::detail::ReadObjectBody(request.body(), {1 << 20, 64}, body)) return 0;
    if (sagaflow::ValidateInput(Saga(), body).empty()) {
        static_cast<void>(sagaflow::CheckCommandSizes(Saga(), body, 1'000'000));
    }
    return 0;
}
