# Which system calls this platform has, found at configure time and written to
# the generated header libkvstore/util/platform_config.h (internal: the
# library and the tests include it, never an installed header). Each
# KVSTORE_HAVE_* is 0 or 1; libkvstore/util/posix_compat.cc holds the one use
# of each Linux-only call and its POSIX fallback (docs/design.md, "Linux-only
# calls").
#
# KVSTORE_PORTABLE=ON pretends the Linux-only calls are absent, so that a
# Linux build compiles and runs the fallbacks that macOS and the other POSIX
# systems get (CI's sanitizer build does). Calls of other systems (F_FULLFSYNC,
# SO_NOSIGPIPE) and POSIX.1-2008's stat fields are detected either way.
include(CheckCXXSourceCompiles)
include(CheckCXXSymbolExists)
include(CheckStructHasMember)

option(KVSTORE_PORTABLE "Build the POSIX fallbacks instead of the Linux-only system calls (for testing them on Linux)" OFF)

# kvstore_check_linux_only(<var> <symbol> <headers>): <var> is 1 when
# <symbol> is declared by <headers> and KVSTORE_PORTABLE is off.
function(kvstore_check_linux_only var symbol headers)
  if(KVSTORE_PORTABLE)
    set(${var} 0 PARENT_SCOPE)
    return()
  endif()
  check_cxx_symbol_exists(${symbol} "${headers}" ${var}_FOUND)
  if(${var}_FOUND)
    set(${var} 1 PARENT_SCOPE)
  else()
    set(${var} 0 PARENT_SCOPE)
  endif()
endfunction()

# Linux-only.
kvstore_check_linux_only(KVSTORE_HAVE_RENAME_EXCHANGE RENAME_EXCHANGE "stdio.h;fcntl.h")
if(KVSTORE_HAVE_RENAME_EXCHANGE)
  # The macro alone is not enough: glibc before 2.28 has no renameat2().
  check_cxx_source_compiles([[
    #include <fcntl.h>
    #include <stdio.h>
    int main() { return renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE); }]]
    KVSTORE_HAVE_RENAMEAT2)
  if(NOT KVSTORE_HAVE_RENAMEAT2)
    set(KVSTORE_HAVE_RENAME_EXCHANGE 0)
  endif()
endif()
kvstore_check_linux_only(KVSTORE_HAVE_O_PATH O_PATH "fcntl.h")
kvstore_check_linux_only(KVSTORE_HAVE_MSG_NOSIGNAL MSG_NOSIGNAL "sys/socket.h")
kvstore_check_linux_only(KVSTORE_HAVE_SYNC_FILE_RANGE sync_file_range "fcntl.h")
kvstore_check_linux_only(KVSTORE_HAVE_MADV_POPULATE_READ MADV_POPULATE_READ "sys/mman.h")
kvstore_check_linux_only(KVSTORE_HAVE_MAP_NORESERVE MAP_NORESERVE "sys/mman.h")
# Per-thread nice values: a thread id for setpriority and RLIMIT_NICE.
kvstore_check_linux_only(KVSTORE_HAVE_THREAD_NICE SYS_gettid "sys/syscall.h")
kvstore_check_linux_only(KVSTORE_HAVE_RLIMIT_NICE RLIMIT_NICE "sys/resource.h")
if(NOT KVSTORE_HAVE_RLIMIT_NICE)
  set(KVSTORE_HAVE_THREAD_NICE 0)
endif()
# The tests' Redis servers die with their test (prctl PR_SET_PDEATHSIG).
kvstore_check_linux_only(KVSTORE_HAVE_PDEATHSIG PR_SET_PDEATHSIG "sys/prctl.h")
# In-kernel copies between files (kvtool convert of a plain file to a plain file).
kvstore_check_linux_only(KVSTORE_HAVE_COPY_FILE_RANGE copy_file_range "unistd.h")
# POSIX, but macOS declares no fdatasync().
kvstore_check_linux_only(KVSTORE_HAVE_FDATASYNC fdatasync "unistd.h")
# The tests' and prompt_cache_sim's /proc/self (fd, statm, exe).
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND NOT KVSTORE_PORTABLE)
  set(KVSTORE_HAVE_PROC_SELF 1)
else()
  set(KVSTORE_HAVE_PROC_SELF 0)
endif()

# Other systems' calls, detected in every build.
check_cxx_symbol_exists(F_FULLFSYNC "fcntl.h" KVSTORE_HAVE_F_FULLFSYNC)
check_cxx_symbol_exists(SO_NOSIGPIPE "sys/socket.h" KVSTORE_HAVE_SO_NOSIGPIPE)
check_struct_has_member("struct stat" st_mtim "sys/stat.h" KVSTORE_HAVE_STAT_MTIM LANGUAGE CXX)
check_struct_has_member("struct stat" st_mtimespec "sys/stat.h" KVSTORE_HAVE_STAT_MTIMESPEC LANGUAGE CXX)
foreach(var KVSTORE_HAVE_F_FULLFSYNC KVSTORE_HAVE_SO_NOSIGPIPE KVSTORE_HAVE_STAT_MTIM KVSTORE_HAVE_STAT_MTIMESPEC)
  if(${var})
    set(${var} 1)
  else()
    set(${var} 0)
  endif()
endforeach()

set(KVSTORE_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/libkvstore/util/platform_config.h.in
               ${KVSTORE_GENERATED_INCLUDE_DIR}/libkvstore/util/platform_config.h @ONLY)
if(KVSTORE_PORTABLE)
  message(STATUS "kvstore: KVSTORE_PORTABLE: the POSIX fallbacks replace the Linux-only calls")
endif()
