# Optimisation levels by role, to hold make test's build time (it builds the tree three times:
# release, ASan, fuzz). The compute paths keep their level in every tree; code that only builds
# graphs, parses configs, drives the fit loop or asserts in tests is compiled at a lower one,
# where its run time is a rounding error but its compile time is not. Measured with g++ 12
# (CPU seconds for one file, 2026-12-07):
#   ASan+UBSan   tests/train/multi_output_test.cpp   -O1 39.3 s   -O0 13.4 s
#                src/nn/config.cpp                   -O1 42.8 s   -O0 17.2 s
#                src/backends/cpu/norm_kernels.cpp   -O1 18.4 s   -O0  5.6 s (kept at -O1: hot)
#   Release      tests/train/multi_output_test.cpp   -O3 16.0 s   -O1 12.2 s
#   clang fuzz   src/nn/config.cpp                   -O1 34.9 s   -O0 15.5 s
# Sanitizers still see every line at -O0 (ASan instruments more there, not less).
#
# lockstep_optimize(<target> hot|glue|test):
#   hot   kernels, tensors, the pipeline, graph passes: the build type's level everywhere;
#   glue  layers' configs, saving, the fit loop, collectives' set-up, tools: -O0 under the
#         sanitizers, the build type's level otherwise;
#   test  the test programs: -O0 under the sanitizers (their own code is assertions and small
#         loops; the library they call keeps its level). The release tree keeps -O3 for them: -O1
#         would save about a quarter of their compile time, not yet tried across the suite.
function(lockstep_optimize target role)
  if(role STREQUAL "hot")
    return()
  elseif(NOT role MATCHES "^(glue|test)$")
    message(FATAL_ERROR "lockstep_optimize(${target} ${role}): role is hot, glue or test")
  endif()
  if(LOCKSTEP_SANITIZE)
    target_compile_options(${target} PRIVATE -O0)
  endif()
endfunction()

# The modules whose run time is small next to the kernels they call (src/modules.txt names).
set(LOCKSTEP_GLUE_MODULES backend_xla io distribute nn viz losses metrics optimizers trainers saving
    callbacks applications onnx tools)
