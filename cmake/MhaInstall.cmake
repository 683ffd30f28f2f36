# Installs the library with a CMake package so that another project can say
# find_package(mha CONFIG) and link mha::mha.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MHA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/mha")

install(TARGETS mha EXPORT mhaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/mha DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mhaTargets NAMESPACE mha:: DESTINATION ${MHA_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/mhaConfig.cmake.in
  "${PROJECT_BINARY_DIR}/mhaConfig.cmake"
  INSTALL_DESTINATION ${MHA_INSTALL_CMAKEDIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/mhaConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/mhaConfig.cmake"
              "${PROJECT_BINARY_DIR}/mhaConfigVersion.cmake"
        DESTINATION ${MHA_INSTALL_CMAKEDIR})
