# Warnings as an INTERFACE target, linked PRIVATE by every sagaflow target (STYLE.md).
add_library(sagaflow_warnings INTERFACE)
add_library(sagaflow::warnings ALIAS sagaflow_warnings)
target_compile_options(sagaflow_warnings INTERFACE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast -Wnon-virtual-dtor
    # g++ 12 at -O2 reports std::variant/std::optional members holding std::string as "maybe used
    # uninitialized" when they are moved (GCC bugs 105562, 107138): false positives that would fail
    # the release build under -Werror. -Wuninitialized (definite cases) stays on.
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>
    $<$<BOOL:${SAGAFLOW_WERROR}>:-Werror>)
