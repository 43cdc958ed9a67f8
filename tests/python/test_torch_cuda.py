"""The Python package on torch tensors: CPU tensors everywhere torch is
installed; CUDA tensors on a GPU machine (skipped elsewhere): golden bytes,
a non-default stream, CUDA-graph capture and replay with new inputs, device
-side errors, conformance against the naive PyTorch program."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kvcompress
from kvcompress.rand import generate, slot_rows
from kvcompress.reference import reference_compress, conforms
from conftest import golden_cases, case_kwargs, canon_rows, call_kwargs

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def _tensor(x, device):
    if x.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch takes its bits
        return torch.from_numpy(np.array(x).view(np.uint16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.array(x)).to(device)


def to_torch(case, device):
    t = [_tensor(x, device) if isinstance(x, np.ndarray) else x for x in case.inputs()]
    t[5] = t[5].view(torch.bfloat16)
    return t


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("d", golden_cases(max_tokens=32768), ids=lambda d: d["name"])
def test_golden_exact(d, device):
    with generate(**case_kwargs(d)) as c:
        t = to_torch(c, device)
        t[8].fill_(0x5A)
        bias = None if c.score_bias is None else _tensor(c.score_bias, device)
        out = kvcompress.c128_256_512_compress(*t, **call_kwargs(d), score_bias=bias)
        assert out is t[8]
        rows = slot_rows(out.cpu().numpy(), len(c.boundary_token_indices), int(d["kv_block_size"]), d["format"])
        assert np.array_equal(rows, canon_rows(d))


def _cpu_bytes(c):
    kv = c.kv_cache.copy()
    args = list(c.inputs())
    args[8] = kv
    kvcompress.c128_256_512_compress(*args)
    return kv


@cuda
def test_non_default_stream():
    with generate(4, 8192, 256, 8, shuffle=True, seed=9) as c:
        want = _cpu_bytes(c)
        t = to_torch(c, "cuda")
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            kvcompress.c128_256_512_compress(*t)
        s.synchronize()
        assert np.array_equal(t[8].cpu().numpy(), want)


@cuda
def test_cuda_graph_capture_and_replay_with_new_inputs():
    with generate(2, 4096, 128, 8, shuffle=True, seed=10) as c1, generate(2, 4096, 128, 8, shuffle=True, seed=11) as c2:
        t = to_torch(c1, "cuda")
        kvcompress.c128_256_512_compress(*t)  # warm-up: sizes the workspace outside capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                kvcompress.c128_256_512_compress(*t)
        torch.cuda.current_stream().wait_stream(s)
        for c in (c2, c1):
            new = to_torch(c, "cuda")
            for dst, src in zip(t[:9], new[:9]):
                dst.copy_(src)
            t[8].zero_()
            g.replay()
            torch.cuda.synchronize()
            assert np.array_equal(t[8].cpu().numpy(), _cpu_bytes(c))


@cuda
def test_device_side_error_is_raised_on_check():
    with generate(2, 2048, 128, 8, seed=12) as c:
        t = to_torch(c, "cuda")
        b = int(c.boundary_token_indices[5])
        t[7][b] = 10 ** 9  # slot past the last page: only the kernel sees it
        kvcompress.c128_256_512_compress(*t)
        with pytest.raises(kvcompress.KVCError, match="output 5"):
            kvcompress.check_device_status()
        t[7][b] = 5
        kvcompress.c128_256_512_compress(*t)
        counts = kvcompress.check_device_status()
        assert counts["outputs_written"] == len(c.boundary_token_indices) and counts["outputs_invalid"] == 0


@cuda
@pytest.mark.parametrize("C", [128, 256, 512])
def test_conformance_with_pytorch_program(C):
    with generate(2, 16384, C, 8, shuffle=True, seed=13 + C) as c:
        t = to_torch(c, "cuda")
        n = len(c.boundary_token_indices)
        ref = reference_compress(*t)
        kvcompress.c128_256_512_compress(*t)
        ok, msg, differ = conforms(slot_rows(t[8].cpu().numpy(), n), slot_rows(ref.cpu().numpy(), n))
        assert ok, msg


def test_mixed_devices_refused():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU to mix devices")
    with generate(1, 1024, 128, 8) as c:
        t = to_torch(c, "cpu")
        t[0] = t[0].cuda()
        with pytest.raises(kvcompress.KVCError, match="one device"):
            kvcompress.c128_256_512_compress(*t)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_torch_custom_op_and_compile(device):
    assert hasattr(torch, "compile")
    with generate(2, 2048, 128, 8, shuffle=True, seed=14) as c:
        want = _cpu_bytes(c)
        t = to_torch(c, device)

        def step(*args):
            return kvcompress.c128_256_512_compress(*args)

        out = torch.compile(step)(*t)
        assert torch.ops.kvcompress.compress_ is not None
        assert np.array_equal(out.cpu().numpy(), want)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_fp8_payload_decodes_through_float8_view(device):
    from kvcompress.reference import reference_y
    with generate(2, 4096, 128, 8, shuffle=True, seed=15, nope_format="fp8") as c:
        t = to_torch(c, device)
        kvcompress.c128_256_512_compress(*t, nope_format="fp8")
        n = len(c.boundary_token_indices)
        rows = torch.from_numpy(slot_rows(t[8].cpu().numpy(), n))
        codes = rows[:, :448].contiguous()
        dec = codes.view(torch.float8_e4m3fn).float()                       # values in units of 2^e
        e = rows[:, 576:583].long() - 127                                   # [n, 7]
        vals = dec.view(n, 7, 64) * torch.exp2(e.float())[..., None]
        # the codes are exactly what a float8_e4m3fn cast of the decoded values gives
        assert torch.equal(dec.to(torch.float8_e4m3fn).view(torch.uint8), codes)
        y = reference_y(*[x.cpu() if isinstance(x, torch.Tensor) else x for x in t[:6]], 8, 128)
        z = y[:, :448].to(torch.bfloat16).float().view(n, 7, 64)
        tol = z.abs() * 2.0 ** -4 + torch.exp2(e.float() - 9)[..., None] + z.abs() * 1e-3
        assert bool(((vals - z).abs() <= tol).all())
