# The CUDA backend's module, libpocketllm-cuda.so (src/backends/cuda/*.cu).
#
# The library itself never links CUDA: its loader (src/backends/cuda/
# cuda_loader.c, part of the library like every src/**/*.c) dlopen()s this
# module when a `cuda` context is first created. So the library, the CLI and
# every test build and pass without a CUDA toolkit; this file only adds the
# module, and a test of its exports, when a CUDA compiler is there.
#
#   PL_CUDA=AUTO (default)  build the module when nvcc is found
#   PL_CUDA=ON              require it (configure fails without nvcc)
#   PL_CUDA=OFF             never build it
#   PL_CUDA_ARCHS           CMAKE_CUDA_ARCHITECTURES syntax; default
#                           "75-real;80-real;86-real;89-real;90": machine code
#                           for sm_75/80/86/89/90 plus compute_90 PTX, which
#                           newer GPUs JIT-compile. While developing, pass
#                           -DPL_CUDA_ARCHS=90 (one arch builds ~5x faster).
#
# The CUDA runtime is linked statically into the module (no libcudart.so at
# run time; the driver's libcuda.so.1 is opened by the runtime on first use),
# and only pl_cuda_module_init is exported.

# dlopen/dladdr for the loader (in libc since glibc 2.34; libdl before).
target_link_libraries(pocketllm PRIVATE ${CMAKE_DL_LIBS})
target_link_libraries(pocketllm_static PUBLIC ${CMAKE_DL_LIBS})

set(PL_CUDA "AUTO" CACHE STRING "Build the CUDA module libpocketllm-cuda.so: AUTO (if nvcc is found), ON or OFF")
set_property(CACHE PL_CUDA PROPERTY STRINGS AUTO ON OFF)
set(PL_CUDA_ARCHS "75-real;80-real;86-real;89-real;90" CACHE STRING
    "CUDA architectures of the module (CMAKE_CUDA_ARCHITECTURES syntax)")

string(TOUPPER "${PL_CUDA}" _pl_cuda_mode)
if(_pl_cuda_mode MATCHES "^(OFF|FALSE|NO|0)$")
  message(STATUS "CUDA module: off (PL_CUDA=${PL_CUDA})")
  return()
endif()

# Sanitized / fuzzing builds instrument the library; a CUDA runtime inside an
# ASan process needs special options (protect_shadow_gap=0) and its own
# allocations read as leaks. AUTO leaves the module out of them.
if(_pl_cuda_mode STREQUAL "AUTO" AND (PL_SANITIZE OR PL_FUZZ))
  message(STATUS "CUDA module: not built in a sanitizer/fuzz build (PL_CUDA=ON forces it)")
  return()
endif()

include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${PL_CUDA_ARCHS})
endif()
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(_pl_cuda_mode MATCHES "^(ON|TRUE|YES|1)$")
    message(FATAL_ERROR "PL_CUDA=ON but no CUDA compiler was found (put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  endif()
  message(STATUS "CUDA module: not built (no CUDA compiler found; the cuda backend will report that at run time)")
  return()
endif()
enable_language(CUDA)

# "75-real;90" -> "sm_75 sm_90 + compute_90 PTX", for the module's build string.
set(_pl_archs_str "")
set(_pl_ptx "")
foreach(_a IN LISTS PL_CUDA_ARCHS)
  string(REGEX REPLACE "-.*" "" _n "${_a}")
  if(NOT _a MATCHES "-virtual$")
    string(APPEND _pl_archs_str " sm_${_n}")
  endif()
  if(NOT _a MATCHES "-real$")
    string(APPEND _pl_ptx " compute_${_n}")
  endif()
endforeach()
string(STRIP "${_pl_archs_str}" _pl_archs_str)
if(_pl_ptx)
  string(APPEND _pl_archs_str " + PTX${_pl_ptx}")
endif()

file(GLOB PL_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backends/cuda/*.cu)
add_library(pocketllm_cuda MODULE ${PL_CUDA_SOURCES})
# The directory-wide C options (-Wall, -O2, sanitizers, fuzzer instrumentation)
# are GCC/Clang flags nvcc does not take: start this target from a clean slate.
set_property(TARGET pocketllm_cuda PROPERTY COMPILE_OPTIONS "")
set_property(TARGET pocketllm_cuda PROPERTY LINK_OPTIONS "")
set_target_properties(pocketllm_cuda PROPERTIES
  OUTPUT_NAME pocketllm-cuda
  PREFIX "lib"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  CUDA_ARCHITECTURES "${PL_CUDA_ARCHS}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_RUNTIME_LIBRARY Static
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  POSITION_INDEPENDENT_CODE ON)
target_include_directories(pocketllm_cuda PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
target_compile_definitions(pocketllm_cuda PRIVATE "PL_CUDA_ARCHS_STR=\"${_pl_archs_str}\"")
target_compile_options(pocketllm_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fno-strict-aliasing>
  $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>)
set(_pl_cuda_vers ${CMAKE_BINARY_DIR}/pocketllm-cuda.vers)
file(WRITE ${_pl_cuda_vers} "{\n  global: pl_cuda_module_init;\n  local: *;\n};\n")
target_link_options(pocketllm_cuda PRIVATE
  -Wl,--no-undefined -Wl,--exclude-libs,ALL -Wl,--version-script=${_pl_cuda_vers})
set_property(TARGET pocketllm_cuda APPEND PROPERTY LINK_DEPENDS ${_pl_cuda_vers})
message(STATUS "CUDA module: libpocketllm-cuda.so for ${_pl_archs_str} (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")

# The module's exports and dependencies (runs without a GPU).
add_test(NAME cuda_module_exports
         COMMAND ${CMAKE_COMMAND} -DMODULE=$<TARGET_FILE:pocketllm_cuda> -DNM=${CMAKE_NM}
                 -DOBJDUMP=${CMAKE_OBJDUMP} -P ${CMAKE_SOURCE_DIR}/cmake/check_cuda_module.cmake)
# The kernels' per-block arithmetic (cuda_quant.cuh) compiled for the host and
# checked against the reference decoders: runs without a GPU.
if(NOT PL_FUZZ)
  add_executable(test_cuda_units ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_units.cu)
  set_property(TARGET test_cuda_units PROPERTY COMPILE_OPTIONS "")
  set_target_properties(test_cuda_units PROPERTIES
    CUDA_ARCHITECTURES "${PL_CUDA_ARCHS}"
    CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Static)
  target_include_directories(test_cuda_units PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src
                                                     ${CMAKE_SOURCE_DIR}/tests)
  target_compile_options(test_cuda_units PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter> $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings>)
  target_link_libraries(test_cuda_units PRIVATE pocketllm_static)
  add_test(NAME cuda_unit_math COMMAND test_cuda_units)
endif()

# test_cuda must then find the module (without it, it only checks the
# "no module" error path).
if(TARGET test_cuda)
  target_compile_definitions(test_cuda PRIVATE PL_TEST_CUDA_MODULE_BUILT=1)
  add_dependencies(test_cuda pocketllm_cuda)
endif()
