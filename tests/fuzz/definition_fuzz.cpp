// libFuzzer target over the saga definition loader: any bytes in, diagnostics or a definition out,
// never a crash, a hang, or undefined behaviour (built with ASan + UBSan by scripts/fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/definition_graph.hpp"
#include "core/definition_loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto result = sagaflow::LoadDefinitionString(text, "fuzz.yaml");
    for (const auto& d : result.diagnostics) {
        static_cast<void>(d.ToString());
    }
    if (result.definition) {
        static_cast<void>(sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid));
        static_cast<void>(sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kDot));
        nlohmann::json input = nlohmann::json::object();
        static_cast<void>(sagaflow::ValidateInput(*result.definition, input));
    }
    return 0;
}
