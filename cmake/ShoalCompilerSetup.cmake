# Compiler setup shared by every target: ccache, warnings as errors, optional sanitizers.

find_program(SHOAL_CCACHE ccache)
if(SHOAL_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${SHOAL_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${SHOAL_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${SHOAL_CCACHE})
endif()

option(SHOAL_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(SHOAL_WERROR "Treat warnings as errors" ON)

# shoal_target_warnings(target): the project's warning set for one of our own targets.
function(shoal_target_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wcast-align -Wunused
                                -Wnull-dereference -Wimplicit-fallthrough>)
    # Shadowed locals: GCC spells it -Wshadow=local, clang -Wshadow-uncaptured-local.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wshadow=local>)
    else()
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wshadow-uncaptured-local>)
    endif()
    if(SHOAL_WERROR)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
    endif()
  endif()
endfunction()

if(SHOAL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# No contraction of a*b+c into a fused multiply-add unless the code writes one (std::fma, an
# intrinsic). GCC contracts by default wherever the target has FMA: everywhere on aarch64, only
# in the x86 files built with -mfma. Without this an ARM node would round the engine's float
# code (norms, RoPE angles, the sampler) differently from an x86 one.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
endif()
