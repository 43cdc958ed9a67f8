# The library users link holds no test machinery: none of the test hooks'
# environment variables nor the CPU backend's test entry points appear in it
# (each name would, as a string or a symbol, where compiled in); the test
# build of the library has them (so this check can fail).
# cmake -DPRODUCT=lib1;lib2 -DTESTING=lib -P no_test_hooks.cmake
set(_hooks KVC_OPENCL_TRUST_FP KVC_OPENCL_GPU_PATHS KVC_OPENCL_NO_WIDE KVC_OPENCL_OPT_DISABLE)
set(_entry_points kvc_cpu_force_isa kvc_cpu_exp_mismatches kvc_cpu_finalize_mismatches)
list(JOIN _hooks "|" _h)
list(JOIN _entry_points "|" _e)
set(_names "${_h}|${_e}")
foreach(lib ${PRODUCT})
  file(STRINGS "${lib}" found REGEX "${_names}")
  if(found)
    list(REMOVE_DUPLICATES found)
    message(FATAL_ERROR "${lib} holds test machinery: ${found}")
  endif()
  message(STATUS "ok   ${lib}: no test hook, no test entry point")
endforeach()
# every test entry point by its name in the test build (a renamed one would
# otherwise leave its old name here, matching nothing)
foreach(sym ${_entry_points})
  file(STRINGS "${TESTING}" found REGEX "${sym}")
  if(NOT found)
    message(FATAL_ERROR "${TESTING} lacks ${sym}: this check would not see it")
  endif()
endforeach()
message(STATUS "ok   ${TESTING} (the test build) has them")
