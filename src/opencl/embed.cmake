# Build-time step: concatenate kvc_canon.h, kvc_check.h, kvc_general.h, kvc_cl_shared.h, kvc_kernel.cl, kvc_slice.cl
# and kvc_indexer.cl
# (dropping #include "..." lines) into a C array of the OpenCL program source.
string(REPLACE "|" ";" SOURCES "${SOURCES}")
set(text "")
foreach(f ${SOURCES})
  file(READ ${f} part)
  string(REGEX REPLACE "#include \"[^\"]*\"" "" part "${part}")
  string(APPEND text "${part}\n")
endforeach()
file(WRITE ${OUT}.cl "${text}")
file(READ ${OUT}.cl hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT} "/* generated from ${SOURCES} */\nconst char kvc_opencl_source[] = {${hex}0x00};\n")
