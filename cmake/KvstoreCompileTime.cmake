# Compile time of cold builds (CI builds the tree three times on 2 cores,
# with no compiler cache).
#
# Precompiled headers: the headers nearly every file of a target includes
# (the standard library's, GoogleTest's, pybind11's) are parsed once per
# target instead of once per file. The standard headers alone cost each file
# about 1.5 s of CPU with clang 14, gtest/gmock two more.
#
# KVSTORE_PCH=AUTO (the default) turns them on for clang without ccache:
#  * ccache cannot reuse its results for a file compiled against a
#    precompiled header without extra settings, and its hits are faster anyway;
#  * GCC 12 loses, through a precompiled header, the system-header status of
#    inlined std::string code, so its known false positives there
#    (-Warray-bounds, -Wstringop-overflow on char_traits::copy at -O2/-O3)
#    fail a -Werror build.
# A build without them (GCC's, or a developer's with ccache) also checks that
# each file includes what it uses.
set(KVSTORE_PCH AUTO CACHE STRING "Precompiled headers: AUTO (clang without ccache), ON or OFF")
set_property(CACHE KVSTORE_PCH PROPERTY STRINGS AUTO ON OFF)
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  set(KVSTORE_COMPILER_CACHE ON)
else()
  set(KVSTORE_COMPILER_CACHE OFF)
endif()
if(KVSTORE_PCH STREQUAL "AUTO")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND NOT KVSTORE_COMPILER_CACHE)
    set(KVSTORE_USE_PCH ON)
  else()
    set(KVSTORE_USE_PCH OFF)
  endif()
else()
  set(KVSTORE_USE_PCH ${KVSTORE_PCH})
endif()
message(STATUS "kvstore: precompiled headers ${KVSTORE_USE_PCH} (KVSTORE_PCH=${KVSTORE_PCH})")

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
