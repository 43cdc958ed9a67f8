#!/usr/bin/env bash
# Per-kernel duration and DRAM traffic of one call (run on the GPU machine): the slice kernel and its finisher,
# each replayed alone by ncu with the caches flushed (PDL's overlap of the finisher with the slice kernel is lost
# under ncu, so the finisher's figure is its cost when nothing waits); the bench prints the case's floor:
#   bench/scripts/ncu_times.sh ./kvcompress reqs=8,tokens=65536,C=128,block=8 [contig|shuffle] > out.txt
exe=$1; spec=$2; layout=${3:-contig}
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,launch__grid_size,launch__waves_per_multiprocessor,sm__warps_active.avg.pct_of_peak_sustained_active
ncu --clock-control none --cache-control all -k 'regex:slice_kernel|slice_finish_kernel' -s 4 -c 4 \
  --metrics "$m" "$exe" bench --backend cuda --repeat 1 --layout "$layout" --cases "$spec"
echo "-- the floor read (read_kernel; the last ones are the case's, the first the bench's read bandwidth)"
ncu --clock-control none --cache-control all -k regex:read_kernel -c 40 --metrics "$m" \
  "$exe" bench --backend cuda --repeat 1 --layout "$layout" --cases "$spec" | grep -E "duration|bytes_read" | tail -8
