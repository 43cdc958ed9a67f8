#!/usr/bin/env bash
# Device-run driver (a GPU machine): runs named steps with the
# binaries of devbin/ (built here, carried there -- a build with
# -DKVC_KIT_SHARED=ON keeps them small: the shared library in devbin/lib) and
# writes every result under $OUT (more than 6 files: as $OUT/results.tgz).
# Usage: bench/scripts/h200.sh step [step ...]
#   golden    golden + semantics suites on CUDA, verify
#   backends  tests/test_backends.c on CUDA (the conformance matrix against the CPU)
#   modes     FAST numerics (golden numerics=fast, test_cuda_fast) and two streams (test_cuda_streams;
#             devbin/test_cuda_streams_old, if present, is the same test built on the previous library)
#   xfloor    kvcompress bench with x_floor: headline exact and fast, engine exact and fast
#   bench     kvcompress bench, headline, both layouts (default kernel)
#   engine    the engine case set
#   opencl    OpenCL golden + semantics + headline bench (NVIDIA's driver)
#   ab        A/B: devbin/kvc vs devbin/kvc_$AB (default old) on $BACKEND (default cuda), headline, twice
#   sanitize  compute-sanitizer memcheck/racecheck/initcheck on golden + errors
#   ncu       stall breakdown of the kernel on two cases
#   sass      instruction mix of the kernels (cuobjdump)
#   pytest    the Python suite with torch on the GPU
#   dsv4      SPEC 9 / 10 (issue 52): golden dsv4 on CUDA, CUDA_FORCE_PTX_JIT=1 (the compute_80 PTX) and
#             NVIDIA OpenCL; the conformance matrix (its random shapes draw the new settings); memcheck;
#             then the engine set (indexer FP8 / MXFP4 at 4 x 8k / 32k / 131k, bf16 state) and, in
#             one run, each bias / bf16 / rotation case beside the same case without it
set -u
D=$PWD/devbin
G=$PWD/tests/data/golden
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# LIB=DIR: a variant build of the library (its libkvcompress.so.0*) before devbin/lib
export LD_LIBRARY_PATH=${LIB:+$LIB:}$D/lib:${LD_LIBRARY_PATH:-}
[ -e /usr/local/nvidia/lib64/libnvidia-opencl.so.1 ] &&
  mkdir -p /etc/OpenCL/vendors && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
step() { echo "== $1 ($(date +%T))"; }
for s in "$@"; do
  case $s in
  golden)
    step golden
    $D/test_golden $G backend=cuda repeat=3 2>&1 | tail -2
    $D/test_semantics backend=cuda 2>&1 | tail -4
    $D/kvc verify --backend cuda --golden $G --random 60 2>&1 | tail -3 ;;
  backends)
    step backends
    $D/test_backends $G backends=cuda random=60 2>&1 | tail -3 ;;
  modes)
    step modes
    $D/test_golden $G backend=cuda numerics=fast 2>&1 | tee $OUT/golden-fast.txt | tail -2
    $D/test_cuda_fast 2>&1 | tee $OUT/cuda-fast.txt | tail -4
    $D/test_cuda_streams 200 2>&1 | tail -2
    [ -x $D/test_cuda_streams_old ] && { echo "previous library:"; $D/test_cuda_streams_old 200 2>&1 | tail -3; } ;;
  xfloor)
    step xfloor
    for m in exact fast; do
      $D/kvc bench --backend cuda --numerics $m --json ${JSON_DIR:-/tmp}/cuda-headline-$m.json > $OUT/cuda-headline-$m.txt 2>&1
      tail -2 $OUT/cuda-headline-$m.txt
      $D/kvc bench --backend cuda --cases engine --numerics $m --json ${JSON_DIR:-/tmp}/cuda-engine-$m.json > $OUT/cuda-engine-$m.txt 2>&1
      tail -2 $OUT/cuda-engine-$m.txt
    done ;;
  bench)
    step bench
    $D/kvc bench --backend cuda --json $OUT/cuda-headline.json > $OUT/cuda-headline.txt 2>&1; tail -3 $OUT/cuda-headline.txt ;;
  engine)
    step engine
    $D/kvc bench --backend cuda --cases engine --json $OUT/engine.json > $OUT/engine.txt 2>&1; cat $OUT/engine.txt ;;
  opencl)
    step opencl
    $D/test_golden $G backend=opencl repeat=3 2>&1 | tail -2
    $D/test_semantics backend=opencl 2>&1 | tail -3
    $D/kvc bench --backend opencl --json $OUT/opencl-headline.json > $OUT/opencl-headline.txt 2>&1; tail -3 $OUT/opencl-headline.txt ;;
  ab)
    # A/B: devbin/kvc against devbin/kvc_$AB (default old) on $BACKEND (default cuda), interleaved, same call
    step ab
    be=${BACKEND:-cuda}
    for r in 1 2; do for b in kvc_${AB:-old} kvc; do
      $D/$b bench --backend $be --layout ${LAYOUT:-contig} > $OUT/$be-ab-$b-$r.txt 2>&1
      echo "$b run $r"; grep -E "t131072|t65536_c128|t32768_c128|t8192|failed" $OUT/$be-ab-$b-$r.txt
    done; done ;;
  sanitize)
    step sanitize
    for t in ${TOOLS:-memcheck racecheck initcheck}; do
      timeout 200 compute-sanitizer --tool $t --error-exitcode 9 $D/test_golden $G dirs=main,edge,engine backend=cuda > $OUT/san-$t-golden.txt 2>&1
      echo "$t golden rc=$?"; tail -2 $OUT/san-$t-golden.txt
      timeout 120 compute-sanitizer --tool $t --error-exitcode 9 $D/test_semantics backend=cuda > $OUT/san-$t-semantics.txt 2>&1
      echo "$t semantics rc=$?"; tail -2 $OUT/san-$t-semantics.txt
    done ;;
  ncu)
    step ncu
    for c in reqs=8,tokens=131072,C=128,block=8 reqs=1,tokens=8192,C=512,block=8; do
      bench/scripts/ncu_stalls.sh $D/kvc $c > $OUT/ncu-$c.txt 2>&1; tail -30 $OUT/ncu-$c.txt
    done ;;
  sass)
    step sass
    cuobjdump -sass -arch sm_90 $D/kvc > $OUT/sass-all.txt 2>&1
    grep -c "LDL\|STL" $OUT/sass-all.txt
    python3 - $OUT/sass-all.txt <<'PY'
import re, sys, collections
txt = open(sys.argv[1]).read()
for fn in re.findall(r"Function : (\S+)", txt):
    body = txt.split("Function : " + fn, 1)[1].split("Function : ", 1)[0]
    ops = collections.Counter(m.split()[0].split(".")[0] for m in re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", body))
    print(fn, sum(ops.values()), "instructions:", ", ".join(f"{k} {v}" for k, v in ops.most_common(14)))
PY
    ;;
  pytest)
    step pytest
    KVCOMPRESS_LIB=$D/libkvcompress.so PYTHONPATH=$PWD/python python3 -m pytest -q -p no:cacheprovider tests/python > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt ;;
  dsv4)
    step dsv4
    $D/test_golden $G dirs=dsv4 backend=cuda repeat=3 2>&1 | tail -1
    CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_DISABLE=1 $D/test_golden $G backend=cuda 2>&1 | tail -1
    $D/test_golden $G dirs=dsv4 backend=opencl 2>&1 | tail -1
    $D/test_backends $G backends=cuda,opencl random=60 2>&1 | tail -3
    timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $D/test_golden $G dirs=dsv4 backend=cuda \
      > $OUT/san-dsv4.txt 2>&1; echo "memcheck dsv4 rc=$?"
    for be in cuda opencl; do
      $D/kvc bench --backend $be --cases engine --json $OUT/$be-engine-dsv4.json > $OUT/$be-engine-dsv4.txt 2>&1
      grep -E "ifp8|mxfp4|bf16|failed" $OUT/$be-engine-dsv4.txt
    done
    # each setting beside the same case without it, one run per pair (x_floor against the case's own bytes)
    for pair in "reqs=8,tokens=131072,C=128,block=8,format=fp8,kv_block=2|bias=1" \
                "reqs=4,tokens=131072,C=4,block=4,overlap=1,format=fp8|bias=1" \
                "reqs=8,tokens=131072,C=128,block=8,format=fp8,kv_block=2|state=bf16" \
                "reqs=4,tokens=131072,C=4,block=4,overlap=1,format=fp8|state=bf16" \
                "reqs=4,tokens=131072,C=4,block=4,overlap=1,format=indexer_mxfp4|rotate=1"; do
      base=${pair%|*}; extra=${pair#*|}
      for spec in $base $base,$extra; do
        $D/kvc bench --backend cuda --cases $spec --layout shuffle 2>&1 | grep shuffle
        $D/kvc bench --backend cuda --numerics fast --cases $spec --layout shuffle 2>&1 | grep shuffle
      done
    done ;;
  *) echo "unknown step $s" ;;
  esac
done
step "done"
# the device tool brings back only a few files per call: more than 6 go back as one archive
# (tar xzf results.tgz where they land)
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && tar czf /tmp/h200-results.tgz --exclude results.tgz . && find . -mindepth 1 -delete &&
    mv /tmp/h200-results.tgz results.tgz)
fi
