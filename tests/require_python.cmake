# ctest -P driver (issue 20): configuring with KVC_REQUIRE_PYTHON_TESTS=ON (as
# scripts/test.sh does) and a Python without numpy/pytest must fail with a
# message, not drop the Python tests silently.  The Python: a fresh virtual
# environment without the system's packages.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${PY} -m venv ${WORK}/venv RESULT_VARIABLE rc)
if(rc)
  message(STATUS "SKIP: cannot make a virtual environment")
  return()
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/build -DKVC_CUDA=OFF -DKVC_OPENCL=OFF
                -DKVC_REQUIRE_PYTHON_TESTS=ON -DPython3_EXECUTABLE=${WORK}/venv/bin/python
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "configure with a Python lacking numpy/pytest succeeded: the Python tests would be skipped silently")
endif()
if(NOT err MATCHES "cannot[\n ]+import[\n ]+numpy")
  message(FATAL_ERROR "configure failed without naming the missing Python packages:\n${err}")
endif()
message(STATUS "refused as expected")
