# Compile time of cold builds (CI builds the tree three times on 2 cores,
# with no compiler cache).
#
# Precompiled headers: the headers nearly every file of a target includes
# (the standard library's, GoogleTest's, pybind11's) are parsed once per
# target instead of once per file. The standard headers alone cost each file
# about 1.5 s of CPU with clang 14, gtest/gmock two more.
#
# KVSTORE_PCH=AUTO (the default) turns them on where no ccache is in use
# (ccache cannot reuse its results for a file compiled against a precompiled
# header without extra settings, and its hits are faster anyway):
#  * for the tests with any compiler (KVSTORE_USE_TEST_PCH): GoogleTest and
#    gmock are most of each test file's compile time;
#  * for the library, apps and Python module with clang only
#    (KVSTORE_USE_PCH): GCC 12 loses, through a precompiled header, the
#    system-header status of inlined std::string code, so its known false
#    positives there (-Warray-bounds, -Wstringop-overflow on
#    char_traits::copy at -O2/-O3) fail a -Werror build. The tests are
#    compiled at -O1 (kvstore_test_options), where GCC does not run those
#    flow-sensitive passes.
# A build without them (a developer's with ccache) also checks that each file
# includes what it uses.
set(KVSTORE_PCH AUTO CACHE STRING "Precompiled headers: AUTO (no ccache; library with clang only), ON or OFF")
set_property(CACHE KVSTORE_PCH PROPERTY STRINGS AUTO ON OFF)
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  set(KVSTORE_COMPILER_CACHE ON)
else()
  set(KVSTORE_COMPILER_CACHE OFF)
endif()
if(KVSTORE_PCH STREQUAL "AUTO")
  if(KVSTORE_COMPILER_CACHE)
    set(KVSTORE_USE_TEST_PCH OFF)
  else()
    set(KVSTORE_USE_TEST_PCH ON)
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND KVSTORE_USE_TEST_PCH)
    set(KVSTORE_USE_PCH ON)
  else()
    set(KVSTORE_USE_PCH OFF)
  endif()
else()
  set(KVSTORE_USE_PCH ${KVSTORE_PCH})
  set(KVSTORE_USE_TEST_PCH ${KVSTORE_PCH})
endif()
message(STATUS "kvstore: precompiled headers: library ${KVSTORE_USE_PCH}, tests ${KVSTORE_USE_TEST_PCH} (KVSTORE_PCH=${KVSTORE_PCH})")

# The standard headers that most of the library, the apps and the tests include.
set(KVSTORE_PCH_STD_HEADERS
  <algorithm> <array> <atomic> <cstddef> <cstdint> <cstring> <functional> <map>
  <memory> <mutex> <optional> <span> <string> <string_view> <unordered_map> <utility>
  <variant> <vector>)

#   kvstore_precompile_headers(<target> [<header>...])
# Precompiles the standard headers above and the given ones for <target>.
function(kvstore_precompile_headers target)
  if(KVSTORE_USE_PCH)
    target_precompile_headers(${target} PRIVATE ${KVSTORE_PCH_STD_HEADERS} ${ARGN})
  endif()
endfunction()

#   kvstore_reuse_precompiled_headers(<target> <from>)
# <target> (compiled with the same options as <from>) uses <from>'s precompiled headers.
function(kvstore_reuse_precompiled_headers target from)
  if(KVSTORE_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
  endif()
endfunction()

#   kvstore_test_options(<target> [PCH <header>... | REUSE_PCH <from>])
# A test target: kvstore's warning options, -O1 in the optimized build types
# (-O0 in sanitizer builds)
# (a test's own code is never what is measured, and GoogleTest's templates
# at -O3 were two thirds of a Release build's CPU time; the library it links
# keeps the build type's level), and precompiled headers (KVSTORE_USE_TEST_PCH):
# its own of the standard headers and the PCH ones, or <from>'s; none for a
# target of one file.
function(kvstore_test_options target)
  cmake_parse_arguments(TEST "" "REUSE_PCH" "PCH" ${ARGN})
  kvstore_target_options(${target})
  if(KVSTORE_SANITIZE)
    # Instrumented test code compiles in half the time at -O0 (about 5 s of
    # CPU less per file with clang's ASan); the library stays at -O1.
    target_compile_options(${target} PRIVATE -O0)
  else()
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>)
  endif()
  if(KVSTORE_USE_TEST_PCH)
    if(TEST_REUSE_PCH)
      target_precompile_headers(${target} REUSE_FROM ${TEST_REUSE_PCH})
    elseif(TEST_PCH)
      target_precompile_headers(${target} PRIVATE ${KVSTORE_PCH_STD_HEADERS} ${TEST_PCH})
    endif()
  endif()
endfunction()

#   kvstore_single_unit(<target>)
# Compiles <target>'s sources as one translation unit (a unity build) when no
# compiler cache is in use: for a target whose every file includes the same
# header-only library and emits its inline code again (kvtool and CLI11:
# about 8 s of CPU per file at -O3, 30 s for all fourteen as one). With ccache,
# each file stays its own unit, so an edit recompiles one file.
function(kvstore_single_unit target)
  if(NOT KVSTORE_COMPILER_CACHE)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
endfunction()

#   kvstore_batch_units(<target>)
# Compiles <target>'s sources in unity batches of up to eight files when no
# compiler cache is in use: the library's files share most of their headers,
# so a cold build (CI builds the library three times) parses them once a batch
# instead of once a file. File-local names must then differ between the files
# of a folder. With ccache, each file stays its own unit. GCC's
# -Wsubobject-linkage, meant for headers, takes the included .cc files for
# headers and is off for them.
function(kvstore_batch_units target)
  if(NOT KVSTORE_COMPILER_CACHE)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
    endif()
  endif()
endfunction()
