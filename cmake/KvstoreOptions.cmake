# Warning and sanitizer flags for kvstore's own targets (never for dependencies).
#
# Warnings are always on; turning them into errors is a developer/CI switch
# (KVSTORE_WERROR, off by default), so that a Release build with another
# compiler or optimisation level never fails on a new warning. GCC's
# flow-sensitive warnings misfire at -O2/-O3 (-Wmaybe-uninitialized through
# std::variant moves, -Wrestrict in inlined std::string code, GCC PR 105329):
# they never fail the build.
#
# GCC 12's false positives that every Release build printed are silenced, not
# just kept from failing it, so that real warnings stand out. Each is one
# known misreading of libstdc++'s inlined std::string code, in GCC 12 only:
#   -Wrestrict          operator+(const char*, std::string&&) at -O2/-O3
#                       ("may overlap up to 9223372036854775811 bytes", GCC PR 105329)
#   -Wstringop-overflow the same code inlined again by the LTO link of the
#                       Python module ("bound ... exceeds maximum object size");
#                       a link option, so compiled code keeps the warning
function(kvstore_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
    target_link_options(${target} PRIVATE -Wno-stringop-overflow)
  endif()
  if(KVSTORE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-error=maybe-uninitialized -Wno-error=restrict)
    endif()
  endif()
  if(KVSTORE_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${KVSTORE_SANITIZE} -fno-omit-frame-pointer
                                             -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${KVSTORE_SANITIZE})
    # Under ASan GCC 12's -Wmaybe-uninitialized misfires on every std::variant.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
  endif()
endfunction()
