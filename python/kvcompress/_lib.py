"""ctypes mirror of include/kvcompress.h and include/kvcompress_rand.h.

Finds libkvcompress in this order: $KVCOMPRESS_LIB, the package folder (a
wheel bundles it there), the source tree's build folders."""
import ctypes
import glob
import os

i64 = ctypes.c_int64
vp = ctypes.c_void_p


class Args(ctypes.Structure):
    _fields_ = [
        ("state_cache", vp), ("num_blocks", i64), ("block_size", i64), ("state_width", i64),
        ("state_stride_block", i64), ("state_stride_token", i64),
        ("token_to_req", vp), ("positions", vp), ("kv_slot_mapping", vp), ("num_tokens", i64),
        ("boundary_token_indices", vp), ("num_outputs", i64),
        ("block_table", vp), ("num_reqs", i64), ("blocks_per_req", i64), ("block_table_stride", i64),
        ("rms_norm_weight", vp),
        ("cos_sin_cache", vp), ("max_pos", i64), ("cos_sin_stride", i64),
        ("kv_cache", vp), ("num_pages", i64), ("page_stride", i64), ("kv_block_size", i64),
        ("compress_ratio", i64), ("rms_norm_eps", ctypes.c_float),
        ("nope_format", ctypes.c_int), ("overlap", ctypes.c_int), ("cos_sin_layout", ctypes.c_int),
        ("numerics", ctypes.c_int),
        ("head_dim", i64), ("rotate", ctypes.c_int), ("state_dtype", ctypes.c_int),
        ("score_bias", vp), ("score_bias_stride", i64),
    ]


class Exec(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("num_threads", ctypes.c_int), ("stream", vp),
                ("device", ctypes.c_int), ("device_status", vp)]


class Report(ctypes.Structure):
    _fields_ = [("outputs_written", i64), ("outputs_padding", i64), ("outputs_nonfinite", i64),
                ("device_async", ctypes.c_int), ("numerics", ctypes.c_int)]


class DeviceStatus(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int32), ("check", ctypes.c_int32), ("output", i64), ("value", i64),
                ("outputs_written", i64), ("outputs_padding", i64), ("outputs_nonfinite", i64),
                ("outputs_invalid", i64)]


class CasePoison(ctypes.Structure):
    _fields_ = [("req", i64), ("pos", i64), ("col", i64), ("value", ctypes.c_float)]


class _Shift(ctypes.Structure):
    _fields_ = [("lo", i64), ("hi", i64), ("shift", ctypes.c_int)]


class CaseParams(ctypes.Structure):
    _fields_ = [("num_reqs", i64), ("total_tokens", i64), ("compress_ratio", i64), ("block_size", i64),
                ("shuffle", ctypes.c_int), ("seed", ctypes.c_uint64), ("score_shift", ctypes.c_int),
                ("kv_block_size", i64), ("nope_format", ctypes.c_int), ("overlap", ctypes.c_int),
                ("cos_sin_layout", ctypes.c_int), ("num_value_shifts", ctypes.c_int),
                ("value_shifts", _Shift * 8), ("num_poison", ctypes.c_int),
                ("poison", ctypes.POINTER(CasePoison)), ("huge_pages", ctypes.c_int), ("first_position", i64),
                ("head_dim", i64), ("rotate", ctypes.c_int), ("state_dtype", ctypes.c_int),
                ("score_bias", ctypes.c_int)]


class Case(ctypes.Structure):
    _fields_ = [("args", Args), ("state_cache", vp), ("token_to_req", vp), ("positions", vp),
                ("kv_slot_mapping", vp), ("boundary_token_indices", vp), ("block_table", vp),
                ("rms_norm_weight", vp), ("cos_sin_cache", vp), ("kv_cache", vp),
                ("state_elems", ctypes.c_size_t), ("kv_cache_bytes", ctypes.c_size_t),
                ("state_bf16", vp), ("score_bias", vp)]


BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2, "opencl": 3}
NOPE_FORMATS = {"int8": 0, "fp8": 1, "fp8_e4m3": 1, "indexer_fp8": 2, "indexer_mxfp4": 3}
FORMAT_NAMES = {0: "int8", 1: "fp8", 2: "indexer_fp8", 3: "indexer_mxfp4"}
COS_SIN_LAYOUTS = {"split": 0, "interleaved": 1}


def _candidates():
    env = os.environ.get("KVCOMPRESS_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libkvcompress.so", "libkvcompress.dylib"):
        yield os.path.join(here, name)
    for name in sorted(glob.glob(os.path.join(here, "libkvcompress.so.*"))):  # a soname link alone
        yield name
    root = os.path.dirname(os.path.dirname(here))
    for build in ("build", "build-cuda", "build-py"):
        yield os.path.join(root, build, "libkvcompress.so")


def load():
    errors = []
    for path in _candidates():
        if os.path.exists(path):
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError as e:  # pragma: no cover - reported below
                errors.append(f"{path}: {e}")
    else:
        raise ImportError("libkvcompress not found: build it (cmake -S . -B build && cmake --build build), "
                          "install the package with pip, or set KVCOMPRESS_LIB. " + "; ".join(errors))
    lib.kvc_compress.argtypes = [ctypes.POINTER(Args), ctypes.POINTER(Exec), ctypes.POINTER(Report)]
    lib.kvc_compress.restype = ctypes.c_int
    lib.kvc_compress_many.argtypes = [ctypes.POINTER(Args), ctypes.c_int, ctypes.POINTER(Exec), ctypes.POINTER(Report)]
    lib.kvc_compress_many.restype = ctypes.c_int
    lib.kvc_validate.argtypes = [ctypes.POINTER(Args)]
    lib.kvc_validate.restype = ctypes.c_int
    lib.kvc_status_string.argtypes = [ctypes.c_int]
    lib.kvc_status_string.restype = ctypes.c_char_p
    lib.kvc_last_error_message.restype = ctypes.c_char_p
    lib.kvc_version_string.restype = ctypes.c_char_p
    lib.kvc_slot_bytes.argtypes = [ctypes.c_int]  # a format's slot bytes: 584, 132 or 68
    lib.kvc_slot_bytes.restype = ctypes.c_int64
    lib.kvc_args_init.argtypes = [ctypes.POINTER(Args)]
    lib.kvc_exec_init.argtypes = [ctypes.POINTER(Exec)]
    lib.kvc_backend_available.argtypes = [ctypes.c_int]
    lib.kvc_cuda_read_status.argtypes = [ctypes.POINTER(Exec), ctypes.POINTER(DeviceStatus)]
    lib.kvc_cuda_read_status.restype = ctypes.c_int
    lib.kvc_check_string.argtypes = [ctypes.c_int]
    lib.kvc_check_string.restype = ctypes.c_char_p
    lib.kvc_case_generate.argtypes = [ctypes.POINTER(CaseParams), ctypes.c_int, ctypes.POINTER(Case)]
    lib.kvc_case_generate.restype = ctypes.c_int
    lib.kvc_case_free.argtypes = [ctypes.POINTER(Case)]
    return lib
