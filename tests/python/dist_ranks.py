"""Two ranks under torch.distributed (issue 22):

    torchrun --nproc-per-node 2 tests/python/dist_ranks.py

One process per GPU over NCCL, as serving engines run tensor / data parallel:

- data parallel: every rank holds the whole batch's state (identical inputs)
  but compresses only its shard of the requests (r % world == rank) into a
  poisoned KV cache; the ranks all-reduce their slot rows (a shard's rows,
  zero elsewhere) and every rank checks the gathered bytes against a
  single-GPU run of the whole batch and against the CPU backend;
- tensor parallel: every rank compresses the whole batch on its own GPU;
  the ranks all-gather their rows and require identical bytes everywhere.

Also prints each rank's kernel time (CUDA graph replay of one call, median of
50) beside the one-rank figure, so that per-GPU time can be compared with
the single-GPU time.  Exit 0 pass, 1 fail.
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kvcompress  # noqa: E402
from kvcompress import rand  # noqa: E402

REQS, PER_REQ, C = 8, 4096, 128


def rows_of(kv, n, S=1):
    return rand.slot_rows(kv, n, S)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    failures = 0
    with rand.generate(reqs=REQS, tokens=REQS * PER_REQ, C=C, block=8, shuffle=True, seed=22, kv_block_size=1) as c:
        host = [np.array(x) if isinstance(x, np.ndarray) else x for x in c.inputs()]
        n = len(host[3])
        # the CPU backend's bytes of the whole batch
        cpu_kv = host[8].copy()
        kvcompress.c128_256_512_compress(*host[:8], cpu_kv, 8, C, kv_block_size=1)
        cpu_rows = rows_of(cpu_kv, n)
        t = [torch.from_numpy(x).to(dev) if isinstance(x, np.ndarray) else x for x in host]
        t[5] = t[5].view(torch.bfloat16)
        # tensor parallel shape: the whole batch on every rank
        full = t[8].clone().fill_(0x5A)
        kvcompress.c128_256_512_compress(*t[:8], full, 8, C, kv_block_size=1)
        torch.cuda.synchronize()
        mine = torch.from_numpy(rows_of(full.cpu().numpy(), n)).to(dev)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        for r, g in enumerate(gathered):
            if not torch.equal(g, gathered[0]):
                print(f"rank {rank}: FAIL tensor parallel: rank {r}'s bytes differ from rank 0's")
                failures += 1
        if not np.array_equal(mine.cpu().numpy(), cpu_rows):
            print(f"rank {rank}: FAIL the whole batch differs from the CPU backend")
            failures += 1
        # data parallel: this rank's requests only
        tok_req = host[1]
        bidx = host[3]
        shard = np.array([b for b in bidx if tok_req[b] % world == rank], dtype=np.int64)
        part = t[8].clone().fill_(0x33)
        kvcompress.c128_256_512_compress(t[0], t[1], t[2], torch.from_numpy(shard).to(dev), *t[4:8], part, 8, C,
                                         kv_block_size=1)
        torch.cuda.synchronize()
        prow = rows_of(part.cpu().numpy(), n)
        owned = np.array([tok_req[b] % world == rank for b in bidx])
        prow[~owned] = 0
        acc = torch.from_numpy(prow.astype(np.int64)).to(dev)
        dist.all_reduce(acc)
        if not np.array_equal(acc.cpu().numpy().astype(np.uint8), cpu_rows):
            print(f"rank {rank}: FAIL data parallel: the gathered shards differ from the single-GPU batch")
            failures += 1
        # per-GPU kernel time: one call in a CUDA graph, replayed
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            kvcompress.c128_256_512_compress(*t[:8], full, 8, C, kv_block_size=1)
            with torch.cuda.graph(g, stream=s):
                kvcompress.c128_256_512_compress(*t[:8], full, 8, C, kv_block_size=1)
        torch.cuda.synchronize()
        times = []
        for _ in range(50):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3)
        dist.barrier()
        print(f"rank {rank}/{world} on {torch.cuda.get_device_name(dev)}: {n} outputs, "
              f"{len(shard)} in its shard, graph replay median {sorted(times)[25]:.1f} us, "
              f"{'ok' if failures == 0 else 'FAILED'}")
    ok = torch.tensor([failures], device=dev)
    dist.all_reduce(ok)
    dist.destroy_process_group()
    return 0 if int(ok.item()) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
