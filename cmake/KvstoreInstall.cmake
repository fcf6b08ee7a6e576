# Installs headers, the library and a CMake package so that a consumer can
#   find_package(kvstore) + target_link_libraries(app kvstore::kvstore)
include(CMakePackageConfigHelpers)

install(TARGETS kvstore EXPORT kvstoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kvstore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kvtool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kvstoreTargets NAMESPACE kvstore:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvstore)

configure_package_config_file(cmake/kvstoreConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kvstoreConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvstore)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kvstoreConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvstoreConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kvstoreConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvstore)
