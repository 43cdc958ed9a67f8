"""The Python package on numpy arrays (CPU backend): golden bytes, errors,
in-place semantics, strided views, bf16 weights as ml_dtypes.bfloat16."""
import numpy as np
import pytest

import kvcompress
from kvcompress.rand import generate, slot_rows
from conftest import golden_cases, case_kwargs, canon_rows, call_kwargs


@pytest.mark.parametrize("d", golden_cases(max_tokens=32768), ids=lambda d: d["name"])
def test_golden_exact(d):
    with generate(**case_kwargs(d)) as c:
        c.kv_cache[:] = 0xA7
        out = kvcompress.c128_256_512_compress(*c.inputs(), **call_kwargs(d), score_bias=c.score_bias)
        assert out is c.kv_cache
        rows = slot_rows(c.kv_cache, len(c.boundary_token_indices), int(d["kv_block_size"]), d["format"])
        assert np.array_equal(rows, canon_rows(d))


def _small(**kw):
    return generate(2, 1024, 128, 8, shuffle=True, seed=5, **kw)


def test_huge_pages_same_case_same_bytes():
    with _small() as a, _small(huge_pages=True) as b:
        assert np.array_equal(a.state_cache, b.state_cache) and np.array_equal(a.block_table, b.block_table)
        a.kv_cache[:] = 0x5C
        b.kv_cache[:] = 0x5C
        kvcompress.c128_256_512_compress(*a.inputs())
        kvcompress.c128_256_512_compress(*b.inputs())
        assert np.array_equal(a.kv_cache, b.kv_cache)


def test_in_place_only_written_slots_change():
    with _small(kv_block_size=4) as c:
        rng = np.random.default_rng(0)
        c.kv_cache[:] = rng.integers(0, 256, c.kv_cache.shape, dtype=np.uint8)
        c.kv_slot_mapping[c.boundary_token_indices[3]] = -1          # padding: skipped
        before = c.kv_cache.copy()
        _, rep = kvcompress.compress(*c.inputs(), kv_block_size=4)
        assert rep["outputs_padding"] == 1 and rep["outputs_written"] == len(c.boundary_token_indices) - 1
        changed = np.argwhere(before != c.kv_cache)
        S = 4
        for page, col in changed:
            slot = page * S + (col // 576 if col < S * 576 else (col - S * 576) // 8)
            assert slot != 3 and slot < len(c.boundary_token_indices)
        assert not np.array_equal(before, c.kv_cache)


def test_bfloat16_weights_and_strided_state():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with _small() as c:
        args = list(c.inputs())
        kvcompress.c128_256_512_compress(*args)
        want = c.kv_cache.copy()
        # same state as a strided view: every other block of a bigger array
        big = np.full((2 * c.state_cache.shape[0],) + c.state_cache.shape[1:], np.nan, np.float32)
        big[::2] = c.state_cache
        args[0] = big[::2]
        args[5] = c.rms_norm_weight.view(ml_dtypes.bfloat16)
        c.kv_cache[:] = 0
        kvcompress.c128_256_512_compress(*args)
        assert np.array_equal(c.kv_cache, want)


def test_errors_are_value_errors_and_write_nothing():
    with _small() as c:
        args = list(c.inputs())
        before = c.kv_cache.copy()
        bad = list(args)
        bad[2] = c.positions.copy()
        bad[2][c.boundary_token_indices[0]] = 5
        with pytest.raises(ValueError, match=r"positions\[boundary_token_indices\[0\]\] = 5 < compress_ratio - 1"):
            kvcompress.c128_256_512_compress(*bad)
        bad = list(args)
        bad[1] = c.token_to_req.astype(np.int64)
        with pytest.raises(kvcompress.KVCError, match="dtype of token_to_req is int64"):
            kvcompress.c128_256_512_compress(*bad)
        bad = list(args)
        bad[9] = 16
        with pytest.raises(ValueError, match="block_size"):
            kvcompress.c128_256_512_compress(*bad)
        bad = list(args)
        bad[4] = c.block_table.copy()
        bad[4][1, 3] = 10_000
        with pytest.raises(kvcompress.KVCError) as e:
            kvcompress.c128_256_512_compress(*bad)
        assert e.value.status == "KVC_ERROR_INDEX_OUT_OF_RANGE" and "10000" in str(e.value)
        assert np.array_equal(before, c.kv_cache)


def test_version():
    assert kvcompress.__version__.count(".") == 2
