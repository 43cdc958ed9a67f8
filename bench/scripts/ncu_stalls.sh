#!/usr/bin/env bash
# Stall breakdown of the CUDA kernel (KVC_NCU_KERNEL, default compress_kernel) on one case (run on the GPU machine);
# KVC_NCU_CACHE=none keeps the caches warm between ncu's replays (default all: flushed before each):
#   bench/scripts/ncu_stalls.sh ./kvcompress reqs=8,tokens=131072,C=128,block=8 > out.txt
exe=$1; spec=$2
m=smsp__inst_executed.sum,smsp__cycles_active.avg,sm__warps_active.avg.pct_of_peak_sustained_active
for s in long_scoreboard short_scoreboard wait math_pipe_throttle barrier lg_throttle mio_throttle not_selected selected dispatch_stall no_instruction membar branch_resolving drain sleeping tex_throttle imc_miss; do
  m=$m,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
m=$m,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
exec ncu --clock-control none --cache-control ${KVC_NCU_CACHE:-all} -k regex:${KVC_NCU_KERNEL:-compress_kernel} -s 3 -c 1 --metrics "$m" "$exe" bench --backend cuda --repeat 1 --layout contig --cases "$spec"
