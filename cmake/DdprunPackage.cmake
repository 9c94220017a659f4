# ddprun_install_package(): the CMake package a user project finds with find_package(ddprun CONFIG REQUIRED):
#   <prefix>/lib/cmake/ddprun/{ddprunConfig,ddprunConfigVersion,ddprunTargets}.cmake
# It holds whatever the export set `ddprunTargets` received: ddprun::sdk (+ the internal static libraries it
# links) where the worker SDK was built, and the executables ddprun::ddprun and ddprun::rendezvous in the
# full build. Call it once, after every part has added its install(TARGETS ... EXPORT ddprunTargets).
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# One version for the package and `ddprun --version`: common/version.hpp, which the binaries compile in.
function(ddprun_read_version out_var)
  file(STRINGS "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../common/version.hpp" line REGEX "kVersion = \"")
  string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" version "${line}")
  if(NOT version)
    message(FATAL_ERROR "no version found in common/version.hpp")
  endif()
  set(${out_var} ${version} PARENT_SCOPE)
endfunction()

function(ddprun_install_package)
  ddprun_read_version(version)
  set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)
  # The config finds Torch (and Threads) only where the SDK is in the package.
  if(TARGET ddprun_sdk)
    set(DDPRUN_PACKAGE_HAS_SDK ON)
  else()
    set(DDPRUN_PACKAGE_HAS_SDK OFF)
  endif()
  install(EXPORT ddprunTargets NAMESPACE ddprun:: DESTINATION ${config_dir})
  configure_package_config_file(
    "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/ddprunConfig.cmake.in"
    "${CMAKE_CURRENT_BINARY_DIR}/ddprunConfig.cmake"
    INSTALL_DESTINATION ${config_dir})
  # 0.x: a new minor version may change the API, so only the same minor version matches.
  write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/ddprunConfigVersion.cmake"
    VERSION ${version} COMPATIBILITY SameMinorVersion)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/ddprunConfig.cmake"
                "${CMAKE_CURRENT_BINARY_DIR}/ddprunConfigVersion.cmake"
          DESTINATION ${config_dir})
endfunction()
