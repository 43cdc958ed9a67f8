"""What the Python binding passes to the C API matches what the arrays hold
(issue 49): a kv_cache narrower than a page is refused before anything is
written (it was written past its end), empty arrays with numpy 2's zero
strides and misaligned index arrays are taken, and kvc-rand cases own their
memory (dropped cases were never freed; closed ones left dangling views)."""
import gc

import numpy as np
import pytest

import kvcompress
from kvcompress import rand


def _kw(kv_block_size=2):
    c = rand.generate(reqs=1, tokens=1024, C=128, block=8, kv_block_size=kv_block_size, seed=5)
    names = ("state_cache", "token_to_req", "positions", "boundary_token_indices", "block_table",
             "rms_norm_weight", "cos_sin_cache", "kv_slot_mapping", "kv_cache")
    kw = {n: getattr(c, n) for n in names}
    kw.update(block_size=8, compress_ratio=128, kv_block_size=kv_block_size)
    return kw


def test_kv_cache_view_narrower_than_a_page_is_refused_and_its_parent_untouched():
    kw = _kw()
    parent = np.full((8, 37376), 7, np.uint8)
    kw["kv_cache"] = parent[:, :100]
    with pytest.raises(kvcompress.KVCError, match=r"kv_cache: pages of 100 bytes .*584 \* kv_block_size = 1168"):
        kvcompress.compress(backend="cpu", **kw)
    assert (parent == 7).all()


def test_kv_cache_of_zero_width_is_refused():
    kw = _kw()
    kw["kv_cache"] = np.zeros((1, 0), np.uint8)
    with pytest.raises(kvcompress.KVCError, match="kv_cache: pages of 0 bytes"):
        kvcompress.compress(backend="cpu", **kw)


def test_kv_cache_view_of_whole_pages_is_written_in_place():
    kw = _kw()
    ref = np.zeros_like(kw["kv_cache"])
    kvcompress.compress(backend="cpu", **dict(kw, kv_cache=ref))
    parent = np.full((kw["kv_cache"].shape[0], 2 * 1168 + 16), 7, np.uint8)
    view = parent[:, 8:8 + 1168]
    kvcompress.compress(backend="cpu", **dict(kw, kv_cache=view))
    np.testing.assert_array_equal(view, ref)
    assert (parent[:, :8] == 7).all() and (parent[:, 8 + 1168:] == 7).all()


def test_empty_outputs_with_zero_strides_are_a_call():
    kw = _kw()
    kw["boundary_token_indices"] = np.zeros((0,), np.int64)
    before = kw["kv_cache"].copy()
    _, rep = kvcompress.compress(backend="cpu", **kw)
    assert rep["outputs_written"] == 0
    np.testing.assert_array_equal(kw["kv_cache"], before)
    # an empty 2-D block table of requests: numpy 2 may report zero strides
    kw2 = _kw()
    kw2["boundary_token_indices"] = np.zeros((0,), np.int64)
    kw2["block_table"] = np.zeros((0, 128), np.int32)
    kw2["token_to_req"] = np.zeros((0,), np.int32)
    kw2["positions"] = np.zeros((0,), np.int64)
    kw2["kv_slot_mapping"] = np.zeros((0,), np.int64)
    kvcompress.compress(backend="cpu", **kw2)


@pytest.mark.parametrize("name,offset", [("positions", 4), ("token_to_req", 2), ("kv_slot_mapping", 4),
                                         ("boundary_token_indices", 1)])
def test_misaligned_index_arrays_are_copied(name, offset):
    kw = _kw()
    ref = np.zeros_like(kw["kv_cache"])
    kvcompress.compress(backend="cpu", **dict(kw, kv_cache=ref))
    x = kw[name]
    buf = np.zeros(x.nbytes + 8, np.uint8)
    mis = buf[offset:offset + x.nbytes].view(x.dtype)
    mis[:] = x
    assert not mis.flags.aligned
    kw[name] = mis
    kvcompress.compress(backend="cpu", **kw)
    np.testing.assert_array_equal(kw["kv_cache"], ref)


def test_misaligned_state_cache_is_refused():
    kw = _kw()
    st = kw["state_cache"]
    buf = np.zeros(st.nbytes + 8, np.uint8)
    mis = buf[2:2 + st.nbytes].view(np.float32).reshape(st.shape)
    kw["state_cache"] = mis
    with pytest.raises(kvcompress.KVCError, match="state_cache.*not a multiple of its element size|aligned"):
        kvcompress.compress(backend="cpu", **kw)


def test_compress_docstring_names_only_the_backends_python_can_call():
    doc = kvcompress.compress.__doc__
    assert '"opencl"' not in doc or "only the C API" in doc
    with pytest.raises(kvcompress.KVCError, match="command queue"):
        kvcompress.compress(backend="opencl", **_kw())


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def test_dropped_cases_are_freed():
    gc.collect()
    before = _rss_mb()
    for _ in range(40):  # 32 MiB of state each: 1.3 GiB if never freed
        rand.generate(1, 8192, 128, 8)
    gc.collect()
    assert _rss_mb() - before < 200


def test_arrays_outlive_close_and_keep_their_memory():
    c = rand.generate(1, 1024, 128, 8, seed=9)
    want = np.array(c.state_cache)
    st, kv = c.state_cache, c.kv_cache
    c.close()
    del c
    gc.collect()
    for _ in range(5):  # whatever reuses freed memory now would show in st
        rand.generate(1, 1024, 128, 8, seed=10)
    np.testing.assert_array_equal(st, want)
    kvcompress.compress(backend="cpu", **dict(_kw(64), kv_cache=np.zeros_like(kv)))


def test_generate_has_a_real_signature_and_refuses_absurd_sizes_at_once():
    import inspect
    params = inspect.signature(rand.generate).parameters
    assert list(params)[:4] == ["reqs", "tokens", "C", "block"] and rand.generate.__doc__
    with pytest.raises((ValueError, MemoryError)):
        rand.generate(1, 1 << 40, 128, 8)  # looped over every token before
    with pytest.raises(ValueError, match="score_shift"):
        rand.generate(1, 1024, 128, 8, score_shift=2 ** 31 - 1)


@pytest.mark.parametrize("name", ["block_table", "positions", "kv_cache", "state_cache"])
def test_a_missing_tensor_says_missing(name):
    kw = _kw()
    kw[name] = None
    with pytest.raises(kvcompress.KVCError, match=f"{name} is missing") as e:
        kvcompress.compress(backend="cpu", **kw)
    assert e.value.status == "KVC_ERROR_NULL_POINTER"


def test_a_wrong_dtype_says_dtype_first():
    kw = _kw()
    kw["state_cache"] = kw["state_cache"].astype(np.float64)
    with pytest.raises(kvcompress.KVCError, match=r"^KVC_ERROR_BAD_SHAPE: dtype of state_cache is float64"):
        kvcompress.compress(backend="cpu", **kw)


def test_a_too_small_cache_names_the_python_arguments():
    kw = _kw()
    kw["kv_cache"] = np.zeros((kw["kv_cache"].shape[0], 1000), np.uint8)
    with pytest.raises(kvcompress.KVCError, match=r"kv_cache.*kv_cache\.shape\[1\].*kv_block_size") as e:
        kvcompress.compress(backend="cpu", **kw)
    assert "page_stride" not in str(e.value)
