# Sanitizer and fuzzing configurations (never part of the default build).
#
#   FRESNEL_SANITIZE=ON  ASan + UBSan over everything (gcc or clang), -fno-sanitize-recover so that
#                        any UB fails the test that hit it. CPU only: configure with
#                        -DFRESNEL_ENABLE_CUDA=OFF (nvcc objects are not instrumented and the CUDA
#                        runtime's allocations confuse LeakSanitizer). scripts/test.sh runs the CPU
#                        suite this way after the normal one.
#   FRESNEL_FUZZ=ON      libFuzzer harnesses (tests/fuzz), clang only, CUDA off. Everything is built
#                        with -fsanitize=fuzzer-no-link,address,undefined; the harnesses link
#                        -fsanitize=fuzzer. scripts/fuzz.sh configures, builds and runs them.
option(FRESNEL_SANITIZE "Build everything with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(FRESNEL_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang, CUDA off)" OFF)

if(FRESNEL_FUZZ OR FRESNEL_SANITIZE)
  if(FRESNEL_ENABLE_CUDA)
    message(FATAL_ERROR "FRESNEL_FUZZ / FRESNEL_SANITIZE builds are CPU only: add -DFRESNEL_ENABLE_CUDA=OFF")
  endif()
  set(fresnel_sanitizers address,undefined)
  if(FRESNEL_FUZZ)
    if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
      message(FATAL_ERROR "FRESNEL_FUZZ needs clang (e.g. -DCMAKE_CXX_COMPILER=clang++-14)")
    endif()
    set(fresnel_sanitizers fuzzer-no-link,address,undefined)
  endif()
  # -g1: line tables for the reports at little compile-time cost.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${fresnel_sanitizers}>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>
    $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer> $<$<COMPILE_LANGUAGE:CXX>:-g1>)
  add_link_options(-fsanitize=address,undefined)
  message(STATUS "fresnel: sanitizers ${fresnel_sanitizers}")
endif()
