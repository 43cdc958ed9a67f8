"""DeepSeek-V4's whole compression step from Python (issue 52, SPEC 9 and 10):
kv_format (nope_format its alias), rotate, score_bias and a bfloat16 state on
numpy arrays (and torch CPU tensors where torch is installed), against the
C library's own bytes of the same case; every bad combination refused with
nothing written; the ctypes mirrors the same size as the C structs."""
import ctypes

import numpy as np
import pytest

import kvcompress
from kvcompress import _lib, rand

ml_dtypes = pytest.importorskip("ml_dtypes")


def _c_size(init, cls):
    """sizeof the C struct: the bytes kvc_*_init clears of a buffer of 0xAB."""
    buf = (ctypes.c_ubyte * 4096)(*([0xAB] * 4096))
    init(ctypes.cast(buf, ctypes.POINTER(cls)))
    return max(i for i in range(4096) if buf[i] != 0xAB) + 1


def test_ctypes_mirror_of_kvc_args_is_the_c_size():
    assert _c_size(kvcompress._L.kvc_args_init, _lib.Args) == ctypes.sizeof(_lib.Args)
    # the new fields land where C puts them: the library reads them back
    a = _lib.Args()
    kvcompress._L.kvc_args_init(ctypes.byref(a))
    a.compress_ratio, a.block_size = 4, 4
    a.head_dim, a.nope_format, a.rotate = 128, 2, 7  # a bad rotation: refused naming it
    assert kvcompress._L.kvc_validate(ctypes.byref(a)) != 0
    assert b"rotate = 7" in kvcompress._L.kvc_last_error_message()


def _make(**kw):
    base = dict(reqs=2, tokens=256, C=4, block=4, overlap=True, shuffle=True, seed=11)
    base.update(kw)
    return rand.generate(**base)


def _arrays(c):
    """Copies of the case's inputs (numpy arrays of our own) and its call options."""
    args = [np.array(x) if isinstance(x, np.ndarray) else x for x in c.inputs()]
    opts = c.options()
    if opts["score_bias"] is not None:
        opts["score_bias"] = np.array(opts["score_bias"])
    return args, opts


SETTINGS = [dict(kv_format="indexer_fp8"), dict(kv_format="indexer_mxfp4", rotate=True),
            dict(kv_format="indexer_fp8", score_bias=True, state_dtype="bfloat16"),
            dict(kv_format="fp8", score_bias=True), dict(kv_format="int8", state_dtype="bfloat16"),
            dict(kv_format="indexer_mxfp4", C=12, overlap=False, block=7, tokens=240)]


@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_python_call_equals_the_c_call(kw):
    with _make(**kw) as c:
        c.kv_cache[:] = 0x5A
        args, opts = _arrays(c)
        ref = c.kv_cache  # the C library through the case's own args
        st = kvcompress._L.kvc_compress(ctypes.byref(c.args), None, None)
        assert st == 0, kvcompress._L.kvc_last_error_message()
        out, rep = kvcompress.compress(*args, **opts)
        assert rep["outputs_written"] == len(c.boundary_token_indices)
        np.testing.assert_array_equal(out, ref)
        assert out.shape[1] == {"indexer_fp8": 132, "indexer_mxfp4": 68}.get(opts["kv_format"], 584) * c.kv_block_size


def test_nope_format_is_an_alias_of_kv_format():
    with _make(kv_format="indexer_mxfp4") as c:
        args, opts = _arrays(c)
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        opts.pop("kv_format")
        kvcompress.compress(*args, kv_format="indexer_mxfp4", **opts)
        kvcompress.compress(*a, nope_format="indexer_mxfp4", **opts)
        np.testing.assert_array_equal(args[8], a[8])
        with pytest.raises(kvcompress.KVCError, match="nope_format is an alias"):
            kvcompress.compress(*a, kv_format="indexer_fp8", nope_format="indexer_mxfp4", **opts)


def _refused(match, args, **opts):
    before = args[8].copy()
    with pytest.raises(kvcompress.KVCError, match=match):
        kvcompress.compress(*args, **opts)
    np.testing.assert_array_equal(args[8], before)  # nothing written


def test_hostile_settings_refused_with_nothing_written():
    with _make(kv_format="indexer_fp8", score_bias=True) as c:
        args, opts = _arrays(c)
        C = c.compress_ratio
        _refused("kv_format 'fp4'", args, **dict(opts, kv_format="fp4"))
        # a 584-byte format on the indexer's rows and weights: refused naming the widths
        _refused("rms_norm_weight: 128 values, expected 512", args, **dict(opts, kv_format="fp8"))
        _refused("score_bias: shape", args, **dict(opts, score_bias=np.zeros((C + 1, 256), np.float32)))
        _refused("score_bias: shape", args, **dict(opts, score_bias=np.zeros((C, 128), np.float32)))
        _refused("dtype of score_bias is float64", args, **dict(opts, score_bias=np.zeros((C, 256))))
        # the bias inside kv_cache: the library's aliasing check
        kv = args[8]
        alias = kv.reshape(-1)[: C * 256 * 4].view(np.float32).reshape(C, 256)
        _refused("kv_cache overlaps score_bias", args, **dict(opts, score_bias=alias))
        # 1024-wide rows (head width 512's) with an indexer format
    with _make(kv_format="fp8") as wide, _make(kv_format="indexer_fp8") as narrow:
        args, opts = _arrays(wide)
        args[5] = np.array(narrow.rms_norm_weight)
        _refused("state_width = 2048 != 512", args, **dict(opts, kv_format="indexer_fp8",
                                                             kv_block_size=wide.kv_block_size))
    with _make(kv_format="indexer_mxfp4", state_dtype="bfloat16") as c:
        args, opts = _arrays(c)
        _refused("dtype of rms_norm_weight is float32", list(args[:5]) + [args[5].astype(np.float32)] + args[6:],
                 **opts)
        _refused("dtype of state_cache is float16", [args[0].astype(np.float16)] + args[1:], **opts)
        # rotation at head width 512: the library's own check
    with _make(kv_format="int8") as c:
        args, opts = _arrays(c)
        _refused("rotate = KVC_ROTATE_HADAMARD is not defined at head_dim = 512", args, **dict(opts, rotate=True))


def test_bf16_state_equals_a_float32_state_of_its_values():
    """SPEC 10: each bf16 element is widened exactly: the float32 array of the same values gives the same bytes."""
    with _make(kv_format="indexer_mxfp4", state_dtype="bfloat16", score_bias=True) as c:
        args, opts = _arrays(c)
        f32 = [args[0].astype(np.float32)] + [x.copy() if isinstance(x, np.ndarray) else x for x in args[1:]]
        kvcompress.compress(*args, **opts)
        kvcompress.compress(*f32, **opts)
        np.testing.assert_array_equal(args[8], f32[8])


def test_torch_cpu_tensors_take_the_new_options():
    torch = pytest.importorskip("torch")
    with _make(kv_format="indexer_fp8", rotate=True, score_bias=True, state_dtype="bfloat16") as c:
        args, opts = _arrays(c)
        ref = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        kvcompress.compress(*ref, **opts)
        t = [torch.from_numpy(x.view(np.uint16) if x.dtype == ml_dtypes.bfloat16 else x)
             if isinstance(x, np.ndarray) else x for x in args]
        t[0] = t[0].view(torch.bfloat16)
        t[5] = t[5].view(torch.bfloat16)
        bias = torch.from_numpy(opts["score_bias"])
        opts.pop("kv_block_size")
        opts["score_bias"] = bias
        out = kvcompress.c128_256_512_compress(*t, kv_block_size=c.kv_block_size, **opts)
        np.testing.assert_array_equal(out.numpy(), ref[8])
        from kvcompress import _torch
        assert _torch.status() == "extension"  # the torch fast path takes every setting
        # the bias as rows of a wider tensor (row stride passed through), and refused shapes
        wide = torch.full((bias.shape[0], bias.shape[1] + 37), float("nan"))
        wide[:, :bias.shape[1]] = bias
        t[8].fill_(0x11)
        kvcompress.c128_256_512_compress(*t, kv_block_size=c.kv_block_size, **dict(opts, score_bias=wide[:, :bias.shape[1]]))
        np.testing.assert_array_equal(t[8].numpy(), ref[8])
        before = t[8].clone()
        with pytest.raises(kvcompress.KVCError, match="score_bias: shape"):
            kvcompress.c128_256_512_compress(*t, kv_block_size=c.kv_block_size, **dict(opts, score_bias=wide))
        with pytest.raises(kvcompress.KVCError, match="rms_norm_weight: 128 values, expected 512"):
            kvcompress.c128_256_512_compress(*t, kv_block_size=c.kv_block_size, **dict(opts, kv_format="fp8"))
        assert torch.equal(t[8], before)
