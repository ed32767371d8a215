// Linked against sagaflow::core alone: loads a definition, decides its first step and prints the
// definition's hash. Exits 0 when all of it works.
#include <iostream>

#include "core/definition_loader.hpp"
#include "core/saga_machine.hpp"

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const auto loaded = sagaflow::LoadDefinitionFile(argv[1]);
    if (!loaded.definition) return 1;
    const auto decision =
        sagaflow::machine::Decide(*loaded.definition, sagaflow::machine::SagaState{}, sagaflow::machine::Begin{});
    std::cout << loaded.definition->name << " " << loaded.definition->hash << ": " << decision.commands.size()
              << " command(s) at the start\n";
    return decision.commands.empty() ? 1 : 0;
}
