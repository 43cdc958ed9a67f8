"""The statement's program, written from docs/CONTRACT.md section 1 in plain PyTorch: gather
every window row, softmax over the window, sum, RMSNorm, quantize, RoPE,
scatter into a fresh zeroed KV cache.  The naive baseline the benchmark times,
and the reference the GPU tests check conformance (docs/CONTRACT.md section 4) against."""
import numpy as np


def _torch():
    """torch, or an ImportError that says what is missing (this module is torch code)."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("kvcompress.reference is written in PyTorch: pip install torch") from e
    return torch


def reference_y(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                block_size, compress_ratio, rms_norm_eps=1e-6):
    """y = RMSNorm(softmax-weighted window sum) * weight, [outputs, 512] float32 (plain windows)."""
    torch = _torch()
    C = compress_ratio
    b = boundary_token_indices
    r = token_to_req[b].long()
    p = positions[b]
    t = p[:, None] - C + 1 + torch.arange(C, device=state_cache.device)[None, :]   # [n, C]
    blk = block_table[r[:, None], t // block_size].long()                          # [n, C]
    rows = state_cache[blk, t % block_size]                                        # [n, C, 1024]
    v, s = rows[..., :512], rows[..., 512:]
    c = (torch.softmax(s, dim=1) * v).sum(dim=1)                                   # [n, 512]
    w = rms_norm_weight.float() if rms_norm_weight.dtype == torch.bfloat16 else \
        rms_norm_weight.view(torch.bfloat16).float()
    return c * torch.rsqrt(c.pow(2).mean(dim=-1, keepdim=True) + rms_norm_eps) * w


def reference_compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                       rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio,
                       rms_norm_eps=1e-6, kv_block_size=64):
    torch = _torch()
    C = compress_ratio
    dev = state_cache.device
    b = boundary_token_indices
    p = positions[b]
    y = reference_y(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                    block_size, compress_ratio, rms_norm_eps)
    n = y.shape[0]
    nope = y[:, :448].to(torch.bfloat16).float().view(n, 7, 64)
    amax = nope.abs().amax(dim=-1).clamp(min=1e-4)                              # [n, 7]
    e = torch.ceil(torch.log2(amax * (1.0 / 127.0)))
    q = torch.trunc(torch.clamp(nope / torch.exp2(e)[..., None], -127, 127)).to(torch.int8).view(n, 448)
    pc = (p // C) * C
    cos, sin = cos_sin_cache[pc, :32], cos_sin_cache[pc, 32:]
    u, vv = y[:, 448::2], y[:, 449::2]
    rope = torch.stack([u * cos - vv * sin, vv * cos + u * sin], dim=-1).view(n, 64).to(torch.bfloat16)
    out = torch.zeros_like(kv_cache)
    slot = kv_slot_mapping[b]
    page, sl = slot // kv_block_size, slot % kv_block_size
    S = kv_block_size
    payload = torch.cat([q.view(torch.uint8), rope.view(torch.uint8)], dim=1)   # [n, 576]
    scales = torch.cat([(e + 127).to(torch.uint8), torch.zeros(n, 1, dtype=torch.uint8, device=dev)], dim=1)
    cols = sl[:, None] * 576 + torch.arange(576, device=dev)[None, :]
    out[page[:, None], cols] = payload
    scols = S * 576 + sl[:, None] * 8 + torch.arange(8, device=dev)[None, :]
    out[page[:, None], scols] = scales
    return out


def conforms(ours, ref, fp8=False):
    """docs/CONTRACT.md sections 4 and 7 conformance of rows [n, 584] against the reference's rows.
    Returns (ok, message, differing NOPE values)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    n = ours.shape[0]
    if not np.array_equal(ours[:, 576:583], ref[:, 576:583]):
        return False, "scale bytes differ", 0
    if ours[:, 583].any():
        return False, "pad byte not 0", 0
    if fp8:
        def ordinal(x):
            x = x.astype(np.int32)
            return np.where(x & 0x80, -(x & 0x7F), x)
        a, b = ordinal(ours[:, :448]), ordinal(ref[:, :448])
    else:
        a, b = ours[:, :448].view(np.int8).astype(np.int32), ref[:, :448].view(np.int8).astype(np.int32)
    d = np.abs(a - b)
    differ = int((d > 0).sum())
    if d.max(initial=0) > 1:
        return False, "a NOPE value differs by more than one step", differ
    if differ > 2 + (n * 448) // 20000:
        return False, f"{differ} NOPE values differ", differ

    def bf16(x):
        return (np.ascontiguousarray(x).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    ra, rb = bf16(ours[:, 448:576]), bf16(ref[:, 448:576])
    if not np.all(np.abs(ra - rb) <= 1e-2 + 1e-2 * np.abs(rb)):
        return False, "RoPE values outside atol = rtol = 1e-2", differ
    return True, "ok", differ
