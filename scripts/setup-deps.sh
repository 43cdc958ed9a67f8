#!/usr/bin/env bash
# Installs what the build and tests need on a Debian/Ubuntu machine, or says
# precisely what is missing.  Used by scripts/bench.sh and scripts/test.sh.
set -u
need_apt=()
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
if [ "${KVC_WANT_OPENCL:-0}" = 1 ]; then
  [ -e /usr/include/CL/cl.h ] || need_apt+=(ocl-icd-opencl-dev opencl-headers)
  ls /etc/OpenCL/vendors/*pocl* >/dev/null 2>&1 || need_apt+=(pocl-opencl-icd)
fi
if [ "${KVC_WANT_SANITIZERS:-0}" = 1 ]; then
  command -v clang >/dev/null 2>&1 || need_apt+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need_apt+=(libclang-rt-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need_apt[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") >/dev/null ||
      { echo "apt-get install ${need_apt[*]} failed" >&2; exit 1; }
  else
    echo "missing: ${need_apt[*]} (install them with: sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
fi
# optional: Oclgrind runs the OpenCL backend's GPU-only kernels in CTest
# (opencl_gpu_paths_*); without it that test is not registered
if [ "${KVC_WANT_OPENCL:-0}" = 1 ] && ! command -v oclgrind >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: oclgrind (optional)"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq oclgrind >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq oclgrind; } >/dev/null 2>&1; } ||
      echo "note: apt-get install oclgrind failed; the opencl_gpu_paths_* tests are left out" >&2
  else
    echo "note: oclgrind not installed (optional: sudo apt-get install oclgrind); opencl_gpu_paths_* are left out" >&2
  fi
fi
exit 0
