"""kvcompress: DeepSeek-V4-style KV-cache compression, exact and fast.

    import kvcompress
    kvcompress.c128_256_512_compress(state_cache, token_to_req, positions,
                                     boundary_token_indices, block_table,
                                     rms_norm_weight, cos_sin_cache,
                                     kv_slot_mapping, kv_cache, block_size,
                                     compress_ratio, rms_norm_eps=1e-6)

writes the compressed slots into ``kv_cache`` in place and returns it.  Torch
CPU tensors and numpy arrays run on the CPU backend; torch CUDA tensors on the
CUDA backend, on the tensor's device and torch's current stream, without
synchronizing.  Strides of state_cache, block_table, cos_sin_cache and kv_cache
are passed through (their last dimension must be contiguous); the 1-D index
tensors are used as they are when contiguous and copied otherwise.

Errors: wrong dtypes (KVC_ERROR_BAD_SHAPE, the message begins "dtype of
<argument>"), a missing tensor (None: KVC_ERROR_NULL_POINTER, "<argument> is
missing"), devices or shapes, and every index check the library
makes on the host, raise :class:`KVCError` (a ``ValueError``) with the
library's message; so does anything the C API cannot express faithfully (zero
or negative strides, read-only or non-native-byte-order arrays, integers that
do not fit, non-integer sizes, unknown backends).  Device, driver and memory
failures raise :class:`KVCDeviceError` (a ``RuntimeError``).  On the GPU, index VALUES are checked by the kernel: a bad
output is skipped and recorded; call :func:`check_device_status` (it
synchronizes the stream) to raise the first such error.
"""
import ctypes
import math

from . import _lib, _torch

__all__ = ["c128_256_512_compress", "compress", "compress_many", "check_device_status", "KVCError", "KVCDeviceError",
           "backend_available", "__version__"]

_L = _lib.load()
__version__ = _L.kvc_version_string().decode()


class KVCError(ValueError):
    """A refused call: ``status`` is the kvc_status name, the text the library's message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class KVCDeviceError(RuntimeError):
    """A device, driver or allocation failure (KVC_ERROR_DEVICE, _OUT_OF_MEMORY,
    _BACKEND_UNAVAILABLE, _GENERIC): not the caller's arguments."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


_RUNTIME_STATUSES = ("KVC_ERROR_GENERIC", "KVC_ERROR_BACKEND_UNAVAILABLE", "KVC_ERROR_OUT_OF_MEMORY",
                     "KVC_ERROR_DEVICE")


def _raise_status(status):
    name = _L.kvc_status_string(status).decode()
    cls = KVCDeviceError if name in _RUNTIME_STATUSES else KVCError
    raise cls(name, _L.kvc_last_error_message().decode())


_PY_BACKENDS = ("cpu", "cuda")  # OpenCL needs a cl_command_queue, which Python cannot pass


def _backend(name):
    if name not in _PY_BACKENDS:
        raise KVCError("KVC_ERROR_BAD_PARAMETER",
                       f"backend {name!r}: expected None, 'cpu' or 'cuda'"
                       + (" (OpenCL needs a command queue: use the C API)" if name == "opencl" else ""))
    return _lib.BACKENDS[name]


def backend_available(name):
    return bool(_L.kvc_backend_available(_backend(name)))


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int(name, v, lo=_INT64[0], hi=_INT64[1]):
    """An integer argument exactly: no floats, strings or bools, and it must fit."""
    import numbers
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name} = {v!r}: expected an integer")
    v = int(v)
    if not lo <= v <= hi:
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name} = {v} does not fit [{lo}, {hi}]")
    return v


def _float(name, v):
    import numbers
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name} = {v!r}: expected a real number")
    return float(v)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


class _View:
    """Pointer, shape and element strides of a torch tensor or numpy array."""

    def __init__(self, name, x, dtypes, ndim, writable=False):
        self.name = name
        self.obj = x
        if x is None:
            raise KVCError("KVC_ERROR_NULL_POINTER", f"{name} is missing (None)")
        if _is_torch(x):
            dt = str(x.dtype).replace("torch.", "")
            self.device = "cuda" if x.is_cuda else ("cpu" if x.device.type == "cpu" else x.device.type)
            self.device_index = x.device.index if x.is_cuda else -1
            self.shape = tuple(x.shape)
            self.strides = tuple(x.stride())
            self.ptr = x.data_ptr()
        else:
            import numpy as np
            if writable and not isinstance(x, np.ndarray):
                raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name}: {type(x).__name__}, expected a numpy array "
                                                          "or torch tensor (it is written in place)")
            x = np.asarray(x)
            self.obj = x
            dt = x.dtype.name
            if dt == "bfloat16" or (dt == "void16"):
                dt = "bfloat16"
            if not x.dtype.isnative:
                raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name}: byte order {x.dtype.str!r} is not this "
                                                          "machine's (use .astype(the native dtype))")
            if writable and not x.flags.writeable:
                raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{name} is read-only; the call writes it in place")
            if any(s % x.itemsize for s in x.strides):
                raise KVCError("KVC_ERROR_BAD_SHAPE", f"{name}: byte strides {x.strides} are not multiples of "
                                                      f"the element size {x.itemsize}")
            self.device, self.device_index = "cpu", -1
            self.shape = x.shape
            self.strides = tuple(s // x.itemsize for s in x.strides)
            self.ptr = x.ctypes.data
            if x.size and not x.flags.aligned:
                raise KVCError("KVC_ERROR_BAD_SHAPE", f"{name}: address {self.ptr:#x} is not a multiple of its "
                                                      f"element size {x.itemsize}; pass an aligned copy (.copy())")
        if dt not in dtypes:
            raise KVCError("KVC_ERROR_BAD_SHAPE", f"dtype of {name} is {dt}, expected {' or '.join(dtypes)}")
        self.dtype = dt
        if len(self.shape) != ndim:
            raise KVCError("KVC_ERROR_BAD_SHAPE", f"{name}: {len(self.shape)} dimensions, expected {ndim}")
        if 0 in self.shape:
            # no element is addressed: numpy 2 reports any strides (0) here; pass the contiguous ones
            self.strides = tuple(math.prod(self.shape[d + 1:]) for d in range(ndim))
        # the C API reads a stride of 0 as "contiguous": a broadcast (0) or
        # reversed (< 0) dimension cannot be passed through faithfully
        for d, (n, st) in enumerate(zip(self.shape, self.strides)):
            if n > 1 and st <= 0:
                raise KVCError("KVC_ERROR_BAD_SHAPE", f"{name}: stride {st} in dimension {d} (a broadcast or "
                                                      "reversed view); pass a copy (.copy() / .contiguous())")
        if ndim > 1 and self.shape[-1] > 1 and self.strides[-1] != 1:
            raise KVCError("KVC_ERROR_BAD_SHAPE", f"{name}: the last dimension must be contiguous "
                                                  f"(stride {self.strides[-1]})")


def _index_1d(name, x, dtypes):
    """1-D index tensors must be contiguous for the C API: copy when they are not
    (broadcast and reversed views included: the copy holds the values they show)."""
    if x is None:
        raise KVCError("KVC_ERROR_NULL_POINTER", f"{name} is missing (None)")
    if _is_torch(x):
        if x.dim() == 1 and x.numel() > 1 and x.stride(0) != 1:
            x = x.contiguous()
    else:
        import numpy as np
        a = np.asarray(x)
        if a.ndim == 1 and a.size and ((a.size > 1 and a.strides[0] != a.itemsize) or not a.flags.aligned):
            x = np.array(a, copy=True)  # a fresh array is contiguous and aligned
    return _View(name, x, dtypes, 1)


def _kv_format(kv_format, nope_format):
    """The slot format from kv_format or its alias nope_format (not both, unless equal)."""
    if kv_format is not None and nope_format is not None and kv_format != nope_format:
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"kv_format {kv_format!r} and nope_format {nope_format!r}: "
                                                  "nope_format is an alias of kv_format; pass one")
    if kv_format is None and nope_format is not None:
        return _enum(_lib.NOPE_FORMATS, "nope_format", nope_format)
    return _enum(_lib.NOPE_FORMATS, "kv_format", "int8" if kv_format is None else kv_format)


def _prepare(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
             cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps=1e-6, *,
             kv_format=None, nope_format=None, overlap=False, cos_sin_layout="split", kv_block_size=64,
             rotate=False, score_bias=None, backend=None, num_threads=0):
    """One call's checked kvc_args and kvc_exec, and the views that hold its
    tensors (keep them while the call runs)."""
    fmt = _kv_format(kv_format, nope_format)
    head_dim = 128 if fmt >= 2 else 512
    slot_bytes = _L.kvc_slot_bytes(fmt)
    st = _View("state_cache", state_cache, ("float32", "bfloat16"), 3)
    t2r = _index_1d("token_to_req", token_to_req, ("int32",))
    pos = _index_1d("positions", positions, ("int64",))
    bidx = _index_1d("boundary_token_indices", boundary_token_indices, ("int64",))
    bt = _View("block_table", block_table, ("int32",), 2)
    w = _View("rms_norm_weight", rms_norm_weight, ("bfloat16", "uint16", "int16"), 1)
    cs = _View("cos_sin_cache", cos_sin_cache, ("float32",), 2)
    slots = _index_1d("kv_slot_mapping", kv_slot_mapping, ("int64",))
    kv = _View("kv_cache", kv_cache, ("uint8",), 2, writable=True)
    views = (st, t2r, pos, bidx, bt, w, cs, slots, kv)
    if score_bias is not None:
        bias = _View("score_bias", score_bias, ("float32",), 2)
        views += (bias,)
    devices = {(v.device, v.device_index) for v in views}
    if len(devices) != 1:
        raise KVCError("KVC_ERROR_BAD_PARAMETER", "all tensors must be on one device, got " +
                       ", ".join(f"{v.name}: {v.device}{'' if v.device_index < 0 else ':%d' % v.device_index}"
                                 for v in views))
    device, device_index = devices.pop()
    if backend is None:
        backend = "cuda" if device == "cuda" else "cpu"
    backend_id = _backend(backend)
    block_size = _int("block_size", block_size)
    compress_ratio = _int("compress_ratio", compress_ratio)
    kv_block_size = _int("kv_block_size", kv_block_size)
    num_threads = _int("num_threads", num_threads, -(1 << 31), (1 << 31) - 1)
    rms_norm_eps = _float("rms_norm_eps", rms_norm_eps)
    if (backend == "cuda") != (device == "cuda"):
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"backend {backend} with tensors on {device}")
    if w.shape[0] != head_dim:
        raise KVCError("KVC_ERROR_BAD_SHAPE", f"rms_norm_weight: {w.shape[0]} values, expected {head_dim} "
                                              f"(the head width of kv_format {_lib.FORMAT_NAMES[fmt]!r})")
    if score_bias is not None and (bias.shape[0] != compress_ratio or bias.shape[1] != st.shape[2] // 2):
        raise KVCError("KVC_ERROR_BAD_SHAPE", f"score_bias: shape {tuple(bias.shape)}, expected (compress_ratio, "
                                              f"state_width / 2) = ({compress_ratio}, {st.shape[2] // 2})")
    if cs.shape[1] != 64:
        raise KVCError("KVC_ERROR_BAD_SHAPE", f"cos_sin_cache: rows of {cs.shape[1]}, expected 64")
    if kv.shape[0] > 0 and kv_block_size >= 1 and kv.shape[1] < slot_bytes * kv_block_size:
        raise KVCError("KVC_ERROR_BAD_SHAPE", f"kv_cache: pages of {kv.shape[1]} bytes (kv_cache.shape[1]), "
                                              f"expected >= {slot_bytes} * kv_block_size = {slot_bytes * kv_block_size}")
    n_tok = t2r.shape[0]
    for v in (pos, slots):
        if v.shape[0] != n_tok:
            raise KVCError("KVC_ERROR_BAD_SHAPE", f"{v.name}: {v.shape[0]} tokens, token_to_req has {n_tok}")
    if cos_sin_layout not in _lib.COS_SIN_LAYOUTS:
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"cos_sin_layout {cos_sin_layout!r}: expected split or interleaved")

    a = _lib.Args()
    _L.kvc_args_init(ctypes.byref(a))
    a.state_cache = st.ptr
    a.num_blocks, a.block_size, a.state_width = st.shape[0], int(block_size), st.shape[2]
    if st.shape[1] != int(block_size):
        raise KVCError("KVC_ERROR_BAD_SHAPE", f"state_cache: {st.shape[1]} tokens per block, block_size is "
                                              f"{block_size}")
    # a dimension of one element may report any stride: give the C API the contiguous one
    a.state_stride_token = st.strides[1] if st.shape[1] > 1 else st.shape[2]
    a.state_stride_block = st.strides[0] if st.shape[0] > 1 else st.shape[1] * a.state_stride_token
    a.token_to_req, a.positions, a.kv_slot_mapping, a.num_tokens = t2r.ptr, pos.ptr, slots.ptr, n_tok
    a.boundary_token_indices, a.num_outputs = bidx.ptr, bidx.shape[0]
    a.block_table, a.num_reqs, a.blocks_per_req = bt.ptr, bt.shape[0], bt.shape[1]
    a.block_table_stride = bt.strides[0] if bt.shape[0] > 1 else bt.shape[1]
    a.rms_norm_weight = w.ptr
    a.cos_sin_cache, a.max_pos, a.cos_sin_stride = cs.ptr, cs.shape[0], cs.strides[0] if cs.shape[0] > 1 else 64
    a.kv_cache, a.num_pages = kv.ptr, kv.shape[0]
    a.page_stride = kv.strides[0] if kv.shape[0] > 1 else kv.shape[1]
    a.kv_block_size = int(kv_block_size)
    a.compress_ratio = int(compress_ratio)
    a.rms_norm_eps = float(rms_norm_eps)
    a.nope_format = fmt
    a.head_dim = head_dim
    a.rotate = 1 if rotate else 0
    a.state_dtype = 1 if st.dtype == "bfloat16" else 0
    if score_bias is not None:
        a.score_bias = bias.ptr
        a.score_bias_stride = bias.strides[0] if bias.shape[0] > 1 else bias.shape[1]
    a.overlap = 1 if overlap else 0
    a.cos_sin_layout = _lib.COS_SIN_LAYOUTS[cos_sin_layout]

    e = _lib.Exec()
    _L.kvc_exec_init(ctypes.byref(e))
    e.backend = backend_id
    e.num_threads = num_threads
    if backend == "cuda":
        import torch
        e.device = device_index
        e.stream = torch.cuda.current_stream(device_index).cuda_stream
    return a, e, views


def _report(rep):
    return {"outputs_written": rep.outputs_written, "outputs_padding": rep.outputs_padding,
            "outputs_nonfinite": rep.outputs_nonfinite}


def compress(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
             cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps=1e-6, *,
             kv_format=None, nope_format=None, overlap=False, cos_sin_layout="split", kv_block_size=64,
             rotate=False, score_bias=None, backend=None, num_threads=0):
    """Like :func:`c128_256_512_compress`, with explicit control: ``backend`` is
    None (from the tensors' device), "cpu" or "cuda" (OpenCL takes a command
    queue, which only the C API can pass); ``num_threads``
    is the CPU thread count (0 = up to all cores, fewer for small calls).  Returns (kv_cache, report) where
    report is a dict (GPU: counts are -1, see :func:`check_device_status`).

    DeepSeek-V4's whole compression step (SPEC 9, 10): ``kv_format`` "int8"
    or "fp8" (head width 512, 584-byte slots) or "indexer_fp8" /
    "indexer_mxfp4" (the indexer: head width 128, 132 / 68-byte slots);
    ``nope_format`` is its alias.  The head width follows from the format:
    state rows of 2 x 128 (overlap 4 x 128) elements and 128 weights for the
    indexer.  ``rotate``: the Walsh-Hadamard rotation of the indexer's keys.
    ``score_bias``: None, or a float32 [compress_ratio, state_width / 2]
    array / tensor added to every score (SGLang's ``ape``).  ``state_cache``
    may be float32 or bfloat16 (torch.bfloat16, ml_dtypes.bfloat16)."""
    a, e, views = _prepare(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                           rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio,
                           rms_norm_eps, kv_format=kv_format, nope_format=nope_format, overlap=overlap,
                           cos_sin_layout=cos_sin_layout, kv_block_size=kv_block_size, rotate=rotate,
                           score_bias=score_bias, backend=backend, num_threads=num_threads)
    rep = _lib.Report()
    status = _L.kvc_compress(ctypes.byref(a), ctypes.byref(e), ctypes.byref(rep))
    if status != 0:
        _raise_status(status)
    return kv_cache, _report(rep)


MANY_MAX = 8  # KVC_MANY_MAX: the most argument sets of one compress_many call


def compress_many(calls, *, backend=None, num_threads=0):
    """Several calls at once -- e.g. the main and the indexer compressor of a
    DeepSeek-V4 CSA layer -- with the bytes of separate :func:`compress`
    calls: ``calls`` is a list of at most ``MANY_MAX`` dicts of
    :func:`compress`'s arguments by name (state_cache, ..., compress_ratio,
    and any keyword argument but ``backend`` / ``num_threads``).  On CUDA the
    sets run on torch's current stream, decode-sized ones as one kernel
    launch.  No set may write where another one reads or writes.  Returns the
    report of the whole call (counts summed over the sets)."""
    calls = list(calls)
    if len(calls) > MANY_MAX:
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{len(calls)} calls: at most {MANY_MAX} (MANY_MAX)")
    arr = (_lib.Args * max(len(calls), 1))()
    e, keep = None, []
    for i, kw in enumerate(calls):
        if not isinstance(kw, dict):
            raise KVCError("KVC_ERROR_BAD_PARAMETER", f"calls[{i}]: a dict of compress()'s arguments by name")
        try:
            a, ei, views = _prepare(**kw, backend=backend, num_threads=num_threads)
        except KVCError as err:
            raise type(err)(err.status, f"calls[{i}]: {err.message}") from None
        if e is not None and (ei.backend, ei.device) != (e.backend, e.device):
            raise KVCError("KVC_ERROR_BAD_PARAMETER", f"calls[{i}]: on another device than calls[0]; one device "
                                                      "per call")
        arr[i], e = a, ei
        keep.append(views)
    if e is None:
        e = _lib.Exec()
        _L.kvc_exec_init(ctypes.byref(e))
    rep = _lib.Report()
    status = _L.kvc_compress_many(arr, len(calls), ctypes.byref(e), ctypes.byref(rep))
    if status != 0:
        _raise_status(status)
    return _report(rep)


_TORCH_OP = None
_INT64_MIN, _INT64_MAX = _INT64


def _torch_ints(block_size, compress_ratio, rms_norm_eps, kv_block_size):
    """The scalar arguments of the torch path, exactly (see _int)."""
    if not (type(block_size) is int and type(compress_ratio) is int and type(kv_block_size) is int
            and _INT64_MIN <= block_size <= _INT64_MAX and _INT64_MIN <= compress_ratio <= _INT64_MAX
            and _INT64_MIN <= kv_block_size <= _INT64_MAX):
        block_size, compress_ratio = _int("block_size", block_size), _int("compress_ratio", compress_ratio)
        kv_block_size = _int("kv_block_size", kv_block_size)
    if type(rms_norm_eps) is not float:
        rms_norm_eps = _float("rms_norm_eps", rms_norm_eps)
    return block_size, compress_ratio, rms_norm_eps, kv_block_size


def _enum(table, what, value):
    try:
        return table[value]
    except (KeyError, TypeError):
        raise KVCError("KVC_ERROR_BAD_PARAMETER", f"{what} {value!r}: expected one of "
                                                  f"{', '.join(sorted(table))}") from None


def _torch_call(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps, kv_format,
                overlap, cos_sin_layout, kv_block_size, rotate=False, score_bias=None):
    """One call with torch tensors: through the extension (_torch.py) when it
    is built and every argument is a tensor; else through compress()."""
    ext = _torch.get(_L)
    fmt = _enum(_lib.NOPE_FORMATS, "kv_format", kv_format)
    if ext is not None:
        lay = _enum(_lib.COS_SIN_LAYOUTS, "cos_sin_layout", cos_sin_layout)
        dev = kv_cache.get_device()
        stream = _cuda_stream(dev) if dev >= 0 else 0
        try:
            status = ext.compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                                  rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size,
                                  compress_ratio, rms_norm_eps, fmt, 1 if overlap else 0, lay, kv_block_size, stream,
                                  1 if rotate else 0, score_bias)
        except TypeError:  # an argument that is not a tensor: compress() names it
            status = None
        if status == 0:
            return
        if status is not None:
            if status > 0:
                _raise_status(status)
            name = _L.kvc_status_string(-status).decode()
            raise KVCError(name, ext.last_message())
    compress(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
             cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps,
             kv_format=kv_format, overlap=overlap, cos_sin_layout=cos_sin_layout, kv_block_size=kv_block_size,
             rotate=rotate, score_bias=score_bias)


_cuda_stream = None


def _torch_op():
    """torch.ops.kvcompress.compress_: the call as a torch custom op (mutates
    kv_cache), so torch.compile treats it as one opaque node.  Registered on
    first use with torch tensors."""
    global _TORCH_OP, _cuda_stream
    if _TORCH_OP is None:
        import torch
        from typing import Optional
        _cuda_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None

        @torch.library.custom_op("kvcompress::compress_", mutates_args=("kv_cache",))
        def _op(state_cache: torch.Tensor, token_to_req: torch.Tensor, positions: torch.Tensor,
                boundary_token_indices: torch.Tensor, block_table: torch.Tensor, rms_norm_weight: torch.Tensor,
                cos_sin_cache: torch.Tensor, kv_slot_mapping: torch.Tensor, kv_cache: torch.Tensor,
                block_size: int, compress_ratio: int, rms_norm_eps: float, kv_format: str, overlap: bool,
                cos_sin_layout: str, kv_block_size: int, rotate: bool,
                score_bias: Optional[torch.Tensor]) -> None:
            _torch_call(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                        cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps,
                        kv_format, overlap, cos_sin_layout, kv_block_size, rotate, score_bias)

        @_op.register_fake
        def _(*args):
            return None

        _TORCH_OP = (torch.ops.kvcompress.compress_, torch.compiler.is_compiling)
    return _TORCH_OP


def c128_256_512_compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                          rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio,
                          rms_norm_eps=1e-6, *, kv_format=None, nope_format=None, overlap=False,
                          cos_sin_layout="split", kv_block_size=64, rotate=False, score_bias=None):
    """The statement's signature: writes the compressed slots into kv_cache in
    place and returns kv_cache.  See the module docstring, and compress() for
    kv_format (nope_format: its alias), rotate, score_bias and a bfloat16
    state.  With torch tensors, an eager call goes straight to the compiled
    extension (see _torch.py) on torch's current stream; under torch.compile
    it is the custom op torch.ops.kvcompress.compress_ (one opaque node)."""
    if _is_torch(kv_cache):
        fmt = _lib.FORMAT_NAMES[_kv_format(kv_format, nope_format)]
        op, compiling = _TORCH_OP or _torch_op()
        block_size, compress_ratio, rms_norm_eps, kv_block_size = _torch_ints(block_size, compress_ratio,
                                                                              rms_norm_eps, kv_block_size)
        if compiling() and all(_is_torch(x) for x in (state_cache, token_to_req, positions, boundary_token_indices,
                                                      block_table, rms_norm_weight, cos_sin_cache, kv_slot_mapping)) \
                and (score_bias is None or _is_torch(score_bias)):
            op(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
               cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps, fmt,
               bool(overlap), cos_sin_layout, kv_block_size, bool(rotate), score_bias)
        else:
            _torch_call(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                        cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps,
                        fmt, overlap, cos_sin_layout, kv_block_size, rotate, score_bias)
        return kv_cache
    out, _ = compress(state_cache, token_to_req, positions, boundary_token_indices, block_table, rms_norm_weight,
                      cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio, rms_norm_eps,
                      kv_format=kv_format, nope_format=nope_format, overlap=overlap, cos_sin_layout=cos_sin_layout,
                      kv_block_size=kv_block_size, rotate=rotate, score_bias=score_bias)
    return out


def check_device_status(device=None):
    """Synchronize torch's current stream on `device` and raise KVCError for the
    first device-side index error of the last call there; return the counts."""
    try:
        import torch
    except ImportError as e:
        raise KVCDeviceError("KVC_ERROR_BACKEND_UNAVAILABLE", "check_device_status needs torch (CUDA tensors): "
                                                              "pip install torch") from e
    idx = torch.cuda.current_device() if device is None else torch.device(device).index
    e = _lib.Exec()
    _L.kvc_exec_init(ctypes.byref(e))
    e.backend = _lib.BACKENDS["cuda"]
    e.device = idx
    e.stream = torch.cuda.current_stream(idx).cuda_stream
    s = _lib.DeviceStatus()
    st = _L.kvc_cuda_read_status(ctypes.byref(e), ctypes.byref(s))
    if st != 0:
        _raise_status(st)
    if s.status != 0:
        raise KVCError(_L.kvc_status_string(s.status).decode(),
                       f"device check '{_L.kvc_check_string(s.check).decode()}' failed for output {s.output}: "
                       f"value {s.value}")
    return {"outputs_written": s.outputs_written, "outputs_padding": s.outputs_padding,
            "outputs_nonfinite": s.outputs_nonfinite, "outputs_invalid": s.outputs_invalid}
