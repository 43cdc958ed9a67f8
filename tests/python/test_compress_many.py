"""kvcompress.compress_many (issue 53): a CSA layer's two compressors in one
call give the bytes and the summed counts of two compress() calls; a bad set
is named and nothing is written; on CUDA (torch) the same with a CUDA graph."""
import numpy as np
import pytest

import kvcompress
from kvcompress import rand

NAMES = ("state_cache", "token_to_req", "positions", "boundary_token_indices", "block_table", "rms_norm_weight",
         "cos_sin_cache", "kv_slot_mapping", "kv_cache", "block_size", "compress_ratio")


def _call(c):
    """The case's arguments by name (numpy copies of our own)."""
    args = [np.array(x) if isinstance(x, np.ndarray) else x for x in c.inputs()]
    kw = dict(zip(NAMES, args))
    kw.update(c.options())
    return kw


def _pair():
    """A decode step of a CSA layer: the main compressor and the indexer's, 16 requests x 1 output."""
    common = dict(reqs=16, tokens=64, C=4, block=4, overlap=True, shuffle=True, first_position=32764)
    return rand.generate(kv_format="fp8", seed=3, **common), \
        rand.generate(kv_format="indexer_mxfp4", rotate=True, seed=4, **common)


def test_many_equals_separate_calls():
    main, idx = _pair()
    with main, idx:
        a, b = _call(main), _call(idx)
        a2, b2 = dict(a, kv_cache=a["kv_cache"].copy()), dict(b, kv_cache=b["kv_cache"].copy())
        a["kv_cache"][:] = 0x5A
        b["kv_cache"][:] = 0xA5
        a2["kv_cache"][:] = 0x5A
        b2["kv_cache"][:] = 0xA5
        _, r1 = kvcompress.compress(**a2)
        _, r2 = kvcompress.compress(**b2)
        rep = kvcompress.compress_many([a, b])
        np.testing.assert_array_equal(a["kv_cache"], a2["kv_cache"])
        np.testing.assert_array_equal(b["kv_cache"], b2["kv_cache"])
        assert rep["outputs_written"] == r1["outputs_written"] + r2["outputs_written"] == 32


def test_many_refusals_name_the_set_and_write_nothing():
    main, idx = _pair()
    with main, idx:
        a, b = _call(main), _call(idx)
        before = a["kv_cache"].copy()
        with pytest.raises(kvcompress.KVCError, match=r"calls\[1\]: rms_norm_weight: 512 values, expected 128"):
            kvcompress.compress_many([a, dict(b, rms_norm_weight=a["rms_norm_weight"])])
        slots = b["kv_slot_mapping"].copy()
        slots[b["boundary_token_indices"][3]] = 10 ** 9
        with pytest.raises(kvcompress.KVCError, match=r"args\[1\]: kv_slot_mapping"):
            kvcompress.compress_many([a, dict(b, kv_slot_mapping=slots)])
        with pytest.raises(kvcompress.KVCError, match="overlaps"):
            kvcompress.compress_many([a, dict(b, kv_cache=a["kv_cache"][:, :68 * b["kv_block_size"]])])
        with pytest.raises(kvcompress.KVCError, match="at most 8"):
            kvcompress.compress_many([a] * 9)
        np.testing.assert_array_equal(a["kv_cache"], before)
        assert kvcompress.compress_many([])["outputs_written"] == 0


def test_many_on_cuda_in_a_graph():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not kvcompress.backend_available("cuda"):
        pytest.skip("no CUDA device")
    main, idx = _pair()
    with main, idx:
        a, b = _call(main), _call(idx)
        wants = []
        for kw, fill in ((a, 0x5A), (b, 0xA5)):  # the CPU's bytes of each set on its poison
            want = np.full_like(kw["kv_cache"], fill)
            kvcompress.compress(**dict(kw, kv_cache=want))
            wants.append(want)

        def cuda(kw, fill):
            out = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
            out["rms_norm_weight"] = out["rms_norm_weight"].view(torch.bfloat16)
            out["kv_cache"].fill_(fill)
            return out
        ta, tb = cuda(a, 0x5A), cuda(b, 0xA5)
        g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                kvcompress.compress_many([ta, tb])
            g.replay()
            counts = kvcompress.check_device_status()  # the status word of stream s: both sets' counts
        assert counts["outputs_written"] == 32 and counts["outputs_invalid"] == 0
        np.testing.assert_array_equal(ta["kv_cache"].cpu().numpy(), wants[0])
        np.testing.assert_array_equal(tb["kv_cache"].cpu().numpy(), wants[1])
