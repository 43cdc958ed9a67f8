"""The torch fast path (kvcompress/_torch_ext.cpp): the drop-in's eager calls
go through it; these tests require it to be built and in use, its bytes to be
the ctypes path's on strided and non-contiguous tensors, and every argument
it checks itself to be refused with KVCError naming it.  CPU tensors
wherever torch is installed, CUDA tensors on a GPU machine."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kvcompress
from kvcompress import _torch
from kvcompress.rand import generate

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=cuda)]


def tensors(c, device):
    t = [torch.from_numpy(np.array(x)).to(device) if isinstance(x, np.ndarray) else x for x in c.inputs()]
    t[5] = t[5].view(torch.bfloat16)
    t[8].fill_(0xA5)
    return t


def ctypes_bytes(t, **kw):
    """The same call through kvcompress.compress (the ctypes path)."""
    u = list(t)
    u[8] = t[8].clone()
    kvcompress.compress(*u, **kw)
    return u[8].cpu().numpy()


def test_extension_in_use():
    with generate(1, 512, 128, 8) as c:
        kvcompress.c128_256_512_compress(*tensors(c, "cpu"))
    assert _torch.status() == "extension"


def padded(x, extra):
    """x as a view of a larger tensor: its leading stride grows by `extra` elements
    (the last dimension stays contiguous)."""
    big = torch.full((x.shape[0], x[0].numel() + extra), 7, dtype=x.dtype, device=x.device)
    big[:, :x[0].numel()] = x.reshape(x.shape[0], -1)
    v = big[:, :x[0].numel()]
    return v.unflatten(1, x.shape[1:]) if x.dim() > 2 else v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [dict(reqs=3, tokens=3000, C=128, block=8, shuffle=True, seed=21),
                                  dict(reqs=2, tokens=2048, C=4, block=16, overlap=True, nope_format="fp8",
                                       seed=22),
                                  dict(reqs=1, tokens=4096, C=512, block=64, kv_block_size=3, seed=23)],
                         ids=["c128", "c4-overlap-fp8", "c512-kvb3"])
def test_bytes_equal_ctypes_path_on_strided_tensors(device, case):
    kw = {k: case[k] for k in ("nope_format", "overlap", "kv_block_size") if k in case}
    with generate(**case) as c:
        t = tensors(c, device)
        t[0] = padded(t[0], 1024)           # state_cache: block stride + 1024 floats
        t[4] = padded(t[4], 5)              # block_table: row stride + 5
        t[6] = padded(t[6], 64)             # cos_sin_cache: row stride 128
        t[8] = padded(t[8], 13)             # kv_cache: page stride + 13 bytes
        t[8].fill_(0x3C)
        for i in (1, 2, 3, 7):              # index tensors as strided views: copied
            t[i] = torch.stack([t[i], t[i]], 1)[:, 0]
        want = ctypes_bytes(t, **kw)
        out = kvcompress.c128_256_512_compress(*t, **kw)
        assert out is t[8]
        assert np.array_equal(t[8].cpu().numpy(), want)
        assert _torch.status() == "extension"


def expect(match, t, **kw):
    with pytest.raises(kvcompress.KVCError, match=match):
        kvcompress.c128_256_512_compress(*t, **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_refused_arguments(device):
    with generate(2, 2048, 128, 8, seed=24) as c:
        t = tensors(c, device)
        poison = t[8].clone()

        def with_(i, x):
            u = list(t)
            u[i] = x
            return u

        # broadcast views (stride 0) of the 2-D and 3-D tensors
        expect("state_cache: stride 0", with_(0, t[0][:1].expand(t[0].shape[0], -1, -1)))
        expect("block_table: stride 0", with_(4, t[4][:, :1].expand(-1, t[4].shape[1])))
        expect("cos_sin_cache: stride 0", with_(6, t[6][:1].expand(t[6].shape[0], -1)))
        expect("kv_cache: stride 0", with_(8, t[8][:1].expand(3, -1)))
        # the last dimension not contiguous
        expect("state_cache: the last dimension", with_(0, t[0].transpose(1, 2).contiguous().transpose(1, 2)))
        # dtypes and ranks
        expect("dtype of token_to_req", with_(1, t[1].long()))
        expect("dtype of positions", with_(2, t[2].int()))
        expect("dtype of kv_cache", with_(8, t[8].to(torch.int8)))
        expect("state_cache: 2 dimensions", with_(0, t[0][0]))
        expect("rms_norm_weight: 1024 values", with_(5, torch.cat([t[5], t[5]])))
        expect("cos_sin_cache: rows of 32", with_(6, t[6][:, :32].contiguous()))
        expect("kv_slot_mapping: 5 tokens", with_(7, t[7][:5]))
        # integers and enums: exactly, never converted
        for bad in (128.0, "128", True, 2 ** 64 + 128):
            expect("compress_ratio", with_(10, bad))
        expect("block_size", with_(9, 2 ** 63))
        expect("kv_block_size", t, kv_block_size=64.5)
        expect("nope_format", t, nope_format="int4")
        expect("cos_sin_layout", t, cos_sin_layout=None)
        # index values the host checks (on the CPU) or the shape checks
        expect("block_size is 16", with_(9, 16))
        assert torch.equal(t[8], poison), "a refused call wrote kv_cache"


@pytest.mark.parametrize("device", DEVICES)
def test_kv_cache_narrower_than_a_page_refused_by_the_extension(device):
    """A view narrower than 584 * kv_block_size bytes a page: its leading
    stride is its parent's, so the page would run past the view (issue 49)."""
    with generate(1, 1024, 128, 8, kv_block_size=2) as c:
        t = tensors(c, device)
        parent = torch.full((t[8].shape[0], 37376), 7, dtype=torch.uint8, device=device)
        for narrow in (parent[:, :100], parent[:1, :0]):
            u = list(t)
            u[8] = narrow
            expect(r"kv_cache: pages of \d+ bytes \(kv_cache.size\(1\)\)", u, kv_block_size=2)
        assert bool((parent == 7).all()), "a refused call wrote the parent of the kv_cache view"
        assert _torch.status() == "extension"


@cuda
def test_mixed_devices_refused_by_the_extension():
    with generate(1, 1024, 128, 8) as c:
        t = tensors(c, "cuda")
        for i in (0, 4, 6):
            u = list(t)
            u[i] = t[i].cpu()
            expect("one device", u)


@cuda
def test_current_stream_of_the_tensors_device():
    """The call is queued on torch's current stream: behind a long sleep on a
    side stream, kv_cache is still untouched when the default stream reads it."""
    with generate(3, 6000, 256, 8, shuffle=True, seed=25) as c:
        t = tensors(c, "cuda")
        want = ctypes_bytes(t)
        poison = t[8].cpu()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)   # ~50 ms on s
            kvcompress.c128_256_512_compress(*t)
        early = t[8].cpu()                    # the default stream: does not wait for s
        s.synchronize()
        assert torch.equal(early, poison), "the call ran before the work queued ahead of it on its stream"
        assert np.array_equal(t[8].cpu().numpy(), want)
