# The library users link holds no test machinery: none of the test hooks'
# environment variables nor the CPU backend's test entry points appear in it
# (each name would, as a string or a symbol, where compiled in); the test
# build of the library has them (so this check can fail).
# cmake -DPRODUCT=lib1;lib2 -DTESTING=lib -P no_test_hooks.cmake
set(_names "KVC_OPENCL_TRUST_FP|KVC_OPENCL_GPU_PATHS|KVC_OPENCL_NO_WIDE|KVC_OPENCL_BUILD_OPTIONS|kvc_cpu_force_isa|kvc_cpu_exp16_mismatches|kvc_cpu_finalize_mismatches")
foreach(lib ${PRODUCT})
  file(STRINGS "${lib}" found REGEX "${_names}")
  if(found)
    list(REMOVE_DUPLICATES found)
    message(FATAL_ERROR "${lib} holds test machinery: ${found}")
  endif()
  message(STATUS "ok   ${lib}: no test hook, no test entry point")
endforeach()
file(STRINGS "${TESTING}" found REGEX "kvc_cpu_force_isa")
if(NOT found)
  message(FATAL_ERROR "${TESTING} lacks kvc_cpu_force_isa: this check would not see it")
endif()
message(STATUS "ok   ${TESTING} (the test build) has them")
