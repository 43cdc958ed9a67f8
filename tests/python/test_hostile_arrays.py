"""Arrays and arguments the C API cannot express faithfully are refused with
KVCError (issue 17): broadcast and reversed views, read-only and byte-swapped
arrays, integers that do not fit or are not integers, unknown backends.  Each
of these was passed through before (wrong bytes, a write into an immutable
buffer, or a crash)."""
import numpy as np
import pytest

import kvcompress
from kvcompress import rand

ml_dtypes = pytest.importorskip("ml_dtypes")


def _case():
    """A small case as numpy arrays of our own (copies of the generated C memory)."""
    with rand.generate(reqs=2, tokens=512, C=128, block=8, kv_block_size=1, seed=3) as c:
        names = ("state_cache", "token_to_req", "positions", "boundary_token_indices", "block_table",
                 "rms_norm_weight", "cos_sin_cache", "kv_slot_mapping", "kv_cache")
        kw = {n: np.array(getattr(c, n)) for n in names}
    kw.update(block_size=8, compress_ratio=128, kv_block_size=1)
    return kw


def _call(**kw):
    return kvcompress.compress(backend="cpu", **kw)


@pytest.mark.parametrize("name", ["state_cache", "block_table", "cos_sin_cache", "kv_cache"])
def test_broadcast_view_refused(name):
    kw = _case()
    x = kw[name]
    kw[name] = np.broadcast_to(x[:1], x.shape)
    with pytest.raises(kvcompress.KVCError, match=name):
        _call(**kw)


def test_reversed_view_refused():
    kw = _case()
    kw["cos_sin_cache"] = kw["cos_sin_cache"][::-1]
    with pytest.raises(kvcompress.KVCError, match="cos_sin_cache: stride"):
        _call(**kw)


def test_strided_index_views_are_copied_not_misread():
    kw = _case()
    ref = kw["kv_cache"].copy()
    _call(**dict(kw, kv_cache=ref))
    # the same values through a reversed view and a strided view: copied, the same bytes
    kw["positions"] = kw["positions"][::-1].copy()[::-1]
    kw["kv_slot_mapping"] = np.repeat(kw["kv_slot_mapping"], 2)[::2]
    _call(**kw)
    np.testing.assert_array_equal(kw["kv_cache"], ref)


@pytest.mark.parametrize("how", ["flag", "frombuffer"])
def test_read_only_kv_cache_refused(how):
    kw = _case()
    kv = kw["kv_cache"]
    if how == "flag":
        kv.setflags(write=False)
    else:
        kv = np.frombuffer(bytes(kv.tobytes()), dtype=np.uint8).reshape(kv.shape)
    kw["kv_cache"] = kv
    before = kv.tobytes()
    with pytest.raises(kvcompress.KVCError, match="read-only"):
        _call(**kw)
    assert kv.tobytes() == before


def test_kv_cache_must_be_an_array():
    kw = _case()
    kw["kv_cache"] = kw["kv_cache"].tolist()
    with pytest.raises(kvcompress.KVCError, match="kv_cache"):
        _call(**kw)


@pytest.mark.parametrize("name,dt", [("state_cache", ">f4"), ("positions", ">i8"), ("block_table", ">i4")])
def test_big_endian_refused(name, dt):
    kw = _case()
    kw[name] = kw[name].astype(dt)
    with pytest.raises(kvcompress.KVCError, match="byte order"):
        _call(**kw)


@pytest.mark.parametrize("arg,value", [("compress_ratio", 2**64 + 128), ("compress_ratio", 128.9),
                                       ("compress_ratio", "128"), ("compress_ratio", True),
                                       ("block_size", 8.0), ("kv_block_size", 2**64 + 64),
                                       ("num_threads", 2**31), ("rms_norm_eps", "1e-6")])
def test_non_integer_or_too_big_refused(arg, value):
    kw = _case()
    kw[arg] = value
    with pytest.raises(kvcompress.KVCError, match=arg):
        _call(**kw)


def test_numpy_integers_accepted():
    kw = _case()
    kw["compress_ratio"], kw["block_size"] = np.int64(128), np.int32(8)
    _call(**kw)


@pytest.mark.parametrize("backend", ["tpu", "opencl", "CPU"])
def test_unknown_backend_refused(backend):
    kw = _case()
    with pytest.raises(kvcompress.KVCError, match="backend"):
        kvcompress.compress(backend=backend, **kw)
    with pytest.raises(kvcompress.KVCError):
        kvcompress.backend_available(backend)


def test_errors_by_kind():
    assert issubclass(kvcompress.KVCError, ValueError)
    assert issubclass(kvcompress.KVCDeviceError, RuntimeError)
    assert not issubclass(kvcompress.KVCDeviceError, ValueError)


def test_without_torch_clear_errors():
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here")
    except ImportError:
        pass
    with pytest.raises(kvcompress.KVCDeviceError, match="needs torch"):
        kvcompress.check_device_status()
    from kvcompress import reference
    with pytest.raises(ImportError, match="pip install torch"):
        reference.reference_y(None, None, None, None, None, None, 8, 128)
