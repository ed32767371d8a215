// libFuzzer target over the configuration reader (LoadConfigString): any bytes in, diagnostics or a
// configuration out, never a crash, a hang, or undefined behaviour. The environment is empty and
// the base folder is the fuzzer's own, so `engine.sagas` and secret files name nothing that exists.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto result = sagaflow::LoadConfigString(text, "fuzz.yaml", {}, "/nonexistent");
    for (const auto& d : result.diagnostics) static_cast<void>(d.ToString());
    return 0;
}
