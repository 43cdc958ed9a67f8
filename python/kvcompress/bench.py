"""python -m kvcompress.bench: kvcompress against the naive PyTorch program of
the statement (kvcompress.reference) on the 12 headline cases, docs/CONTRACT.md section 6 timing
(CUDA events, L2 flushed before each call, median), same inputs, same run.

    python -m kvcompress.bench [--layout contig|shuffle|both] [--repeat N]
                               [--json FILE] [--plot FILE.png]
    python -m kvcompress.bench --host [--json FILE]
    python -m kvcompress.bench --cases decode [--layout L] [--json FILE]

--host: the host cost of one call (docs/CONTRACT.md section 6: back-to-back eager calls, the
same run) on a small case (1 request, 1024 tokens, C=128: 8 outputs),
against torch.sum of the same 4 MiB: kvcompress.compress, the drop-in
(eager and as a CUDA-graph replay) and the registered op.
"""
import argparse
import json
import math
import sys

import numpy as np

from . import _L, _lib

HEADLINE = [(1, 8192), (4, 32768), (8, 65536), (8, 131072)]
# the decode set of `kvcompress bench --cases decode`: (C, requests) with one
# output a request at position 32767; C4: overlap FP8, block 4, 64 slots a
# page; C128: FP8, block 8, 2 slots a page.  The C4 rows also run as the
# indexer's compressor (INDEXER_FP8, INDEXER_MXFP4)
DECODE = [(4, 1), (4, 8), (4, 64), (4, 256), (4, 1024), (128, 8), (128, 64), (128, 256)]


WARMUP = 10  # calls before timing (the PyTorch program's first calls grow its allocator's pool)


def _time(fn, repeat, flush):
    import torch
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(repeat + WARMUP):
        flush.random_(0, 255)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        if i >= WARMUP:
            times.append(e0.elapsed_time(e1) * 1e3)
    return float(np.median(times))


def _read_bw(flush):
    import torch
    x = torch.empty(1 << 29, dtype=torch.float32, device="cuda").uniform_()
    t = _time(lambda: x.sum(), 100, flush)
    return x.numel() * 4 / (t * 1e-6) / 1e9


HOST_CALLS = 2000  # calls per sample: long against the timer, short against clock drift


def _host_us(fn, samples=7):
    """Median over samples of the wall time per call of HOST_CALLS back-to-back
    eager calls, the device synchronised before and after each sample."""
    import time

    import torch
    for _ in range(50):
        fn()
    out = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / HOST_CALLS * 1e6)
    return float(np.median(out)), min(out), max(out)


def host_main(json_path):
    import torch

    import kvcompress
    from kvcompress.rand import generate
    try:
        from kvcompress import _torch
        fast_path = _torch.status
    except ImportError:  # a kvcompress without the fast path (for an A/B run)
        fast_path = lambda: "none in this version"
    with generate(1, 1024, 128, 8, seed=5) as case:
        t = [torch.from_numpy(np.array(x)).cuda() if isinstance(x, np.ndarray) else x for x in case.inputs()]
        t[5] = t[5].view(torch.bfloat16)
        drop_in = lambda: kvcompress.c128_256_512_compress(*t)
        drop_in()
        op = torch.ops.kvcompress.compress_
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            drop_in()
        x = t[0]
        rows = [("torch.sum of the same bytes", lambda: torch.sum(x)),
                ("kvcompress.compress (ctypes)", lambda: kvcompress.compress(*t)),
                ("torch.ops.kvcompress.compress_", lambda: op(*t, 1e-6, "int8", False, "split", 64)),
                ("drop-in c128_256_512_compress", drop_in),
                ("drop-in, CUDA graph replay", g.replay)]
        res = [(name, *_host_us(fn)) for name, fn in rows]
    base = res[0][1]
    print(f"kvcompress {kvcompress.__version__} host cost, {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}, fast path: {fast_path()}; 1 x 1024 tokens, C=128, {x.numel() * 4 >> 20} MiB; "
          f"median of 7 x {HOST_CALLS} eager calls")
    print(f"{'call':34} {'us/call':>8} {'min':>7} {'max':>7} {'x sum':>6}")
    for name, med, lo, hi in res:
        print(f"{name:34} {med:8.1f} {lo:7.1f} {hi:7.1f} {med / base:6.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, fast_path=fast_path(),
                           rows=[dict(call=n, us=m, min=lo, max=hi, x_sum=m / base) for n, m, lo, hi in res]),
                      f, indent=1)
    return 0


def decode_main(args):
    """The decode set: kvcompress's time per call (CUDA events, L2 flushed)
    against the floor of its bytes (the window rows and the slots, at the read
    bandwidth measured in the same run)."""
    import torch

    import kvcompress
    from kvcompress.rand import generate
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    bw = _read_bw(flush)
    layouts = ["contig", "shuffle"] if args.layout == "both" else [args.layout]
    print(f"kvcompress {kvcompress.__version__} decode set, {torch.cuda.get_device_name()}, read bandwidth {bw:.0f} GB/s")
    print(f"{'case':28} {'layout':8} {'kvc_us':>9} {'floor_us':>9} {'x_floor':>8}")
    rows = []
    for layout in layouts:
        for fmt in ("fp8", "indexer_fp8", "indexer_mxfp4"):
            for i, (C, reqs) in enumerate(DECODE if fmt == "fp8" else [d for d in DECODE if d[0] == 4]):
                c4 = C == 4
                kw = dict(kv_format=fmt, overlap=c4, kv_block_size=64 if c4 else 2)
                with generate(reqs, reqs * C, C, 4 if c4 else 8, shuffle=(layout == "shuffle"), seed=1 + i,
                              first_position=32768 - C, **kw) as case:
                    t = [torch.from_numpy(np.array(x)).cuda() if isinstance(x, np.ndarray) else x
                         for x in case.inputs()]
                    t[5] = t[5].view(torch.bfloat16)
                    us = _time(lambda: kvcompress.c128_256_512_compress(*t, **kw), args.repeat, flush)
                    n = len(case.boundary_token_indices)
                    slot = _L.kvc_slot_bytes(_lib.NOPE_FORMATS[fmt])
                    floor = (t[0].element_size() * n * C * t[0].shape[-1] + n * slot) / (bw * 1e9) * 1e6
                    name = f"dec_r{reqs}_c{C}" + ("" if fmt == "fp8" else "_" + fmt)
                    rows.append(dict(name=name, layout=layout, kvc_us=us, floor_us=floor, x_floor=us / floor))
                    print(f"{name:28} {layout:8} {us:9.1f} {floor:9.2f} {us / floor:8.2f}", flush=True)
    pairs = _decode_pairs(args, flush, bw, layouts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(read_bw_gbs=bw, device=torch.cuda.get_device_name(), cases=rows, pairs=pairs), f,
                      indent=1)
    return 0


def _decode_pairs(args, flush, bw, layouts):
    """A CSA layer's decode step: its main (FP8) and indexer (INDEXER_FP8)
    compressors, B requests x 1 output each, as two calls and as one
    compress_many call, each captured in a CUDA graph and timed by replay."""
    import torch

    import kvcompress
    from kvcompress.rand import generate
    print(f"\n{'main + indexer (CUDA graphs)':28} {'layout':8} {'2 calls':>9} {'many':>9} {'floor_us':>9} "
          f"{'x_floor':>8} {'many/2':>7}")
    out = []
    for layout in layouts:
        for reqs in (1, 8, 64, 256, 512, 1024):
            kw = dict(overlap=True, kv_block_size=64, shuffle=(layout == "shuffle"), first_position=32764)
            with generate(reqs, reqs * 4, 4, 4, kv_format="fp8", seed=reqs, **kw) as a, \
                    generate(reqs, reqs * 4, 4, 4, kv_format="indexer_fp8", seed=reqs + 1, **kw) as b:
                calls, floor = [], 0.0
                for case, fmt in ((a, "fp8"), (b, "indexer_fp8")):
                    t = [torch.from_numpy(np.array(x)).cuda() if isinstance(x, np.ndarray) else x
                         for x in case.inputs()]
                    t[5] = t[5].view(torch.bfloat16)
                    n = len(case.boundary_token_indices)
                    floor += (t[0].element_size() * n * 4 * t[0].shape[-1] +
                              n * _L.kvc_slot_bytes(_lib.NOPE_FORMATS[fmt])) / (bw * 1e9) * 1e6
                    kwc = dict(kv_format=fmt, overlap=True, kv_block_size=64)
                    calls.append((t, kwc))
                many = [dict(zip(("state_cache", "token_to_req", "positions", "boundary_token_indices",
                                  "block_table", "rms_norm_weight", "cos_sin_cache", "kv_slot_mapping", "kv_cache",
                                  "block_size", "compress_ratio"), t), **kwc) for t, kwc in calls]

                def graph(fn):
                    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
                    with torch.cuda.stream(s):
                        fn()  # the workspace of stream s made before the capture
                        with torch.cuda.graph(g, stream=s):
                            fn()
                    return g
                g2 = graph(lambda: [kvcompress.c128_256_512_compress(*t, **kwc) for t, kwc in calls])
                gm = graph(lambda: kvcompress.compress_many(many))
                t2 = _time(g2.replay, args.repeat, flush)
                tm = _time(gm.replay, args.repeat, flush)
                name = f"pair_r{reqs}_c4"
                out.append(dict(name=name, layout=layout, two_calls_us=t2, many_us=tm, floor_us=floor))
                print(f"{name:28} {layout:8} {t2:9.1f} {tm:9.1f} {floor:9.2f} {tm / floor:8.2f} {tm / t2:7.2f}",
                      flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kvcompress.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--layout", default="both", choices=["contig", "shuffle", "both"])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--torch-repeat", type=int, default=100)  # docs/CONTRACT.md section 6: median of >= 100 calls
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--host", action="store_true", help="the host cost table instead of kernel times")
    ap.add_argument("--cases", default="headline", choices=["headline", "decode"],
                    help="decode: kvcompress alone on the decode set, against the floor of its bytes")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("python -m kvcompress.bench compares the CUDA backend with PyTorch and needs torch with a CUDA GPU "
              "(pip install torch).  Without them: `kvcompress bench` (the CLI; CPU where there is no GPU) times "
              "every backend, and `kvcompress bench --plot FILE.svg` draws x_floor per case.", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("python -m kvcompress.bench needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    if args.host:
        return host_main(args.json)
    if args.cases == "decode":
        return decode_main(args)
    import kvcompress
    from kvcompress.rand import generate, slot_rows
    from kvcompress.reference import reference_compress, conforms
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    bw = _read_bw(flush)
    layouts = ["contig", "shuffle"] if args.layout == "both" else [args.layout]
    rows = []
    print(f"kvcompress {kvcompress.__version__} vs the naive PyTorch program, {torch.cuda.get_device_name()}, "
          f"read bandwidth {bw:.0f} GB/s")
    print(f"{'case':24} {'layout':8} {'torch_us':>10} {'kvc_us':>9} {'floor_us':>9} {'%read':>6} {'speedup':>8}  conform")
    for layout in layouts:
        for i in range(12):
            reqs, tokens = HEADLINE[i % 4]
            C = 128 << (i // 4)
            with generate(reqs, tokens, C, 8, shuffle=(layout == "shuffle"), seed=1 + i) as case:
                t = [torch.from_numpy(np.array(x)).cuda() if isinstance(x, np.ndarray) else x
                     for x in case.inputs()]
                t[5] = t[5].view(torch.bfloat16)
                kv = t[8]
                n = len(case.boundary_token_indices)
                ours = lambda: kvcompress.c128_256_512_compress(*t)
                ref = lambda: reference_compress(*t)
                us_k = _time(ours, args.repeat, flush)
                us_t = _time(ref, args.torch_repeat, flush)
                ours()
                ok, msg, differ = conforms(slot_rows(kv.cpu().numpy(), n), slot_rows(ref().cpu().numpy(), n))
                bytes_ = n * C * 4096 + n * 584
                floor = bytes_ / (bw * 1e9) * 1e6
                name = f"r{reqs}_t{tokens}_c{C}"
                rows.append(dict(name=name, layout=layout, torch_us=us_t, kvc_us=us_k, floor_us=floor,
                                 pct_read_bw=100 * floor / us_k, speedup=us_t / us_k, conforms=ok,
                                 nope_differ=differ))
                print(f"{name:24} {layout:8} {us_t:10.1f} {us_k:9.1f} {floor:9.1f} {100 * floor / us_k:5.1f}% "
                      f"{us_t / us_k:7.1f}x  {msg} ({differ} differ)", flush=True)
    for layout in layouts:
        sp = [r["speedup"] for r in rows if r["layout"] == layout]
        print(f"geomean speedup ({layout}): {math.exp(sum(map(math.log, sp)) / len(sp)):.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(read_bw_gbs=bw, device=torch.cuda.get_device_name(), cases=rows), f, indent=1)
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("--plot needs matplotlib", file=sys.stderr)
            return 1
        sel = [r for r in rows if r["layout"] == layouts[0]]
        x = np.arange(len(sel))
        fig, ax = plt.subplots(figsize=(11, 4.5))
        ax.bar(x - 0.27, [r["torch_us"] for r in sel], 0.27, label="PyTorch program")
        ax.bar(x, [r["kvc_us"] for r in sel], 0.27, label="kvcompress")
        ax.bar(x + 0.27, [r["floor_us"] for r in sel], 0.27, label="memory floor")
        ax.set_yscale("log")
        ax.set_ylabel("us per call (log)")
        ax.set_xticks(x, [r["name"] for r in sel], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"kvcompress on {torch.cuda.get_device_name()} ({layouts[0]} block table)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
