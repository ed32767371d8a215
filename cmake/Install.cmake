# Installation and the CMake package (examples/embedding uses it through find_package(sagaflow)).
# Headers keep the source layout ("engine/engine.hpp"), as in-tree includes do.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(sagaflow_core PROPERTIES EXPORT_NAME core)
set_target_properties(sagaflow_engine PROPERTIES EXPORT_NAME engine)
set_target_properties(sagaflow_outbox PROPERTIES EXPORT_NAME outbox)
set_target_properties(sagaflow_store PROPERTIES EXPORT_NAME store)
set_target_properties(sagaflow_participant PROPERTIES EXPORT_NAME participant)
set_target_properties(sagaflow_config PROPERTIES EXPORT_NAME config)
set_target_properties(sagaflow_warnings PROPERTIES EXPORT_NAME warnings)
foreach(target sagaflow_core sagaflow_engine sagaflow_participant sagaflow_config sagaflow_outbox sagaflow_store)
    target_include_directories(${target} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

install(TARGETS sagaflow_core sagaflow_engine sagaflow_participant sagaflow_config sagaflow_outbox sagaflow_store
    sagaflow_warnings
    EXPORT sagaflowTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS sagaflow RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(module core engine participant config outbox store)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${module}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${module}
        FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(EXPORT sagaflowTargets NAMESPACE sagaflow:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sagaflow)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sagaflowConfig.cmake.in
    ${CMAKE_CURRENT_BINARY_DIR}/sagaflowConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sagaflow)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/sagaflowConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/sagaflowConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/sagaflowConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sagaflow)
