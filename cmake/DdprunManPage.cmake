# ddprun_man_page(TARGET SUMMARY): section-1 man page for an executable, generated at build time by help2man
# from its --help and --version (so it never disagrees with them) and installed under share/man/man1.
# docs/man/<target>.h2m, when present, adds the sections --help has no room for. Without help2man the page
# is skipped with a note: the build does not need it.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(${CMAKE_CURRENT_LIST_DIR}/DdprunPackage.cmake)  # ddprun_read_version
find_program(DDPRUN_HELP2MAN help2man)

function(ddprun_man_page target summary)
  if(NOT DDPRUN_HELP2MAN)
    message(STATUS "help2man not found: no man page for ${target} (scripts/setup installs help2man)")
    return()
  endif()
  set(page ${CMAKE_CURRENT_BINARY_DIR}/${target}.1)
  set(include_file ${PROJECT_SOURCE_DIR}/docs/man/${target}.h2m)
  set(include_args)
  set(depends ${target})
  if(EXISTS ${include_file})
    set(include_args --include ${include_file})
    list(APPEND depends ${include_file})
  endif()
  # --no-info: there is no texinfo manual to point to. help2man runs the freshly built binary through
  # docs/man/help_for_man.sh, which names the sections help2man does not know (Exit status).
  # The version line is given: one version for every executable, read where the build reads it.
  set(filter ${PROJECT_SOURCE_DIR}/docs/man/help_for_man.sh)
  ddprun_read_version(version)
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E env DDPRUN_MAN_PROGRAM=$<TARGET_FILE:${target}>
            ${DDPRUN_HELP2MAN} --no-info --section 1 --name ${summary} ${include_args}
            --version-string "${target} ${version}"
            --output ${page} ${filter}
    DEPENDS ${depends} ${filter}
    COMMENT "man page ${target}.1 from ${target} --help"
    VERBATIM)
  add_custom_target(${target}_man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endfunction()
