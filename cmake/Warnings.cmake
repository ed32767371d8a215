# Warnings as an INTERFACE target, linked PRIVATE by every sagaflow target (STYLE.md).
add_library(sagaflow_warnings INTERFACE)
add_library(sagaflow::warnings ALIAS sagaflow_warnings)
target_compile_options(sagaflow_warnings INTERFACE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast -Wnon-virtual-dtor
    $<$<BOOL:${SAGAFLOW_WERROR}>:-Werror>)
