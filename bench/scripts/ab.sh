#!/bin/bash
# ab.sh -- an A/B of library builds in one run (the contract's section 6): every case is timed with every build, round after round,
# builds interleaved, one `kvcompress bench` process per (round, case,
# build), and the medians compared with the first build by ab_summary.py.
#
#   bench/scripts/ab.sh [-r ROUNDS] [-b BACKEND] [-n NUMERICS] [-x KVC] [-o FILE] \
#                       -c CASE [-c CASE ...] NAME=DIR[@VAR=VALUE...] ...
#
#   NAME=DIR   a build: DIR holds its libkvcompress.so.0* and goes first in
#              LD_LIBRARY_PATH ("-": the library the CLI finds by itself);
#              @VAR=VALUE sets an environment variable for that build only
#              (e.g. A=-  B=/tmp/bB  C=/tmp/bB@KVC_OPENCL_BUILD_LOG=1)
#   -c CASE    a case spec of `kvcompress bench --cases` (one per -c)
#   -r ROUNDS  rounds (default 2); -b BACKEND (default cuda); -n exact|fast
#              (default exact; "exact,fast" runs both)
#   -x KVC     the CLI, built with -DKVC_KIT_SHARED=ON so that it loads the
#              shared library (default: kvcompress on PATH)
#   -o FILE    raw lines (default ab.txt): build round numerics case layout
#              median_us floor_us x_floor check
#
# Then: python3 bench/scripts/ab_summary.py FILE
set -u
rounds=2 backend=cuda numerics=exact kvc=kvcompress out=ab.txt cases=()
while getopts "r:b:n:x:o:c:h" opt; do
    case $opt in
    r) rounds=$OPTARG ;; b) backend=$OPTARG ;; n) numerics=$OPTARG ;; x) kvc=$OPTARG ;;
    o) out=$OPTARG ;; c) cases+=("$OPTARG") ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ ${#cases[@]} -eq 0 ] || [ $# -eq 0 ]; then
    echo "ab.sh: need at least one -c CASE and one NAME=DIR build (-h: usage)" >&2
    exit 2
fi
for b in "$@"; do
    case $b in *=*) ;; *) echo "ab.sh: build \"$b\" is not NAME=DIR" >&2; exit 2 ;; esac
    dir=${b#*=}; dir=${dir%%@*}
    if [ "$dir" != - ] && ! ls "$dir"/libkvcompress.so.0* > /dev/null 2>&1; then
        echo "ab.sh: build ${b%%=*}: no libkvcompress.so.0* in $dir" >&2
        exit 2
    fi
done
: > "$out"
for r in $(seq "$rounds"); do
    for c in "${cases[@]}"; do
        for nm in ${numerics//,/ }; do
            for b in "$@"; do
                name=${b%%=*} rest=${b#*=}
                dir=${rest%%@*} envs=()
                [ "$rest" != "$dir" ] && IFS=@ read -r -a envs <<< "${rest#*@}"
                lib=${LD_LIBRARY_PATH:-}
                [ "$dir" != - ] && lib=$dir${lib:+:$lib}
                env LD_LIBRARY_PATH="$lib" "${envs[@]}" "$kvc" bench --backend "$backend" --numerics "$nm" \
                    --cases "$c" 2>&1 | awk -v b="$name" -v r="$r" -v n="$nm" \
                    '/^(dec_)?r[0-9]/ {print b, r, n, $1, $2, $4, $9, $10, $13}' >> "$out"
            done
        done
    done
done
echo "ab.sh: $(wc -l < "$out") lines in $out"
