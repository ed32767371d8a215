#pragma once
// The operator console's static files (engine/http/console/), compiled into the binary by
// engine/CMakeLists.txt: served at /ui/ with no build step and no network at run time.

#include <string_view>

namespace sagaflow::detail {

struct ConsoleFile {
    std::string_view name;          // e.g. "console.js"
    std::string_view content_type;  // from the extension
    std::string_view body;
};

// nullptr when there is no such file.
const ConsoleFile* FindConsoleFile(std::string_view name);

// The console's Content-Security-Policy: its own scripts, styles and API only; no inline script,
// no other origin, no framing. Diagrams arrive as SVG through the API and are shown as images
// (blob: URLs), where SVG cannot run script.
inline constexpr std::string_view kConsoleSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace sagaflow::detail
