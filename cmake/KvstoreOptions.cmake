# Warning and sanitizer flags for kvstore's own targets (never for dependencies).
function(kvstore_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  if(KVSTORE_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${KVSTORE_SANITIZE} -fno-omit-frame-pointer
                                             -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${KVSTORE_SANITIZE})
    # GCC 12's -Wmaybe-uninitialized misfires on std::variant under ASan.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
  endif()
endfunction()
