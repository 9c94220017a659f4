# ddprun_warnings(target): the warning set every ddprun target compiles with.
function(ddprun_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Wunused -Woverloaded-virtual -Wdouble-promotion -Wformat=2
    -Wimplicit-fallthrough)
  if(DDPRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
