// _torch_ext.cpp -- the torch fast path of kvcompress.c128_256_512_compress
// (every setting: the slot formats, rotation, score_bias, a bf16 state).
//
// Built on first use with torch.utils.cpp_extension (CPU headers only, no CUDA
// toolkit needed) and cached; see _torch.py.  It reads the tensors' metadata
// in C++ (no Python per argument) and calls kvc_compress through the function
// pointers the ctypes binding hands over in init(), so both paths share one
// library instance: one per-stream workspace, one last-error message.
//
// Status convention of compress(): 0 = done; > 0 = the kvc_status the library
// returned (message: kvc_last_error_message); < 0 = minus the kvc_status of a
// check made here (message: last_message()).  The Python wrapper raises.
#include <torch/extension.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kvcompress.h"

namespace {

using compress_fn = kvc_status (*)(const kvc_args *, const kvc_exec *, kvc_report *);
using init_fn = void (*)(void *);

struct Lib {
    compress_fn compress = nullptr;
    init_fn args_init = nullptr;
    init_fn exec_init = nullptr;
};
Lib lib;
thread_local std::string message;

struct Refused {
    kvc_status status;
};

[[noreturn]] void refuse(kvc_status status, std::string text) {
    message = std::move(text);
    throw Refused{status};
}

// One tensor argument: dtype, rank, device, and strides the C API can take
// (a stride <= 0 on a dimension of more than one element is a broadcast or
// reversed view: the C API reads 0 as "contiguous").
const at::Tensor &check(const char *name, const at::Tensor &t, at::ScalarType dtype, int64_t ndim,
                        c10::Device device) {
    if (t.scalar_type() != dtype && !(dtype == at::kBFloat16 && (t.scalar_type() == at::kShort ||
                                                                  t.scalar_type() == at::kUInt16)))
        refuse(KVC_ERROR_BAD_SHAPE, std::string("dtype of ") + name + " is " + c10::toString(t.scalar_type()) +
                                        ", expected " + c10::toString(dtype));
    if (t.dim() != ndim)
        refuse(KVC_ERROR_BAD_SHAPE, std::string(name) + ": " + std::to_string(t.dim()) + " dimensions, expected " +
                                        std::to_string(ndim));
    if (t.device() != device)
        refuse(KVC_ERROR_BAD_PARAMETER, std::string("all tensors must be on one device: ") + name + " is on " +
                                            t.device().str() + ", kv_cache on " + device.str());
    for (int64_t d = 0; d < ndim; d++)
        if (t.size(d) > 1 && t.stride(d) <= 0)
            refuse(KVC_ERROR_BAD_SHAPE, std::string(name) + ": stride " + std::to_string(t.stride(d)) +
                                            " in dimension " + std::to_string(d) +
                                            " (a broadcast or reversed view); pass .contiguous()");
    if (ndim > 1 && t.size(ndim - 1) > 1 && t.stride(ndim - 1) != 1)
        refuse(KVC_ERROR_BAD_SHAPE, std::string(name) + ": the last dimension must be contiguous (stride " +
                                        std::to_string(t.stride(ndim - 1)) + ")");
    return t;
}

// 1-D index tensors must be contiguous for the C API: a copy when they are not.
at::Tensor index_1d(const char *name, const at::Tensor &t, at::ScalarType dtype, c10::Device device) {
    if (t.dim() == 1 && t.numel() > 1 && t.stride(0) != 1) return check(name, t.contiguous(), dtype, 1, device);
    return check(name, t, dtype, 1, device);
}

// The stride of dimension d, or the contiguous one where the dimension has a
// single element (torch may report any stride there).
int64_t stride_or(const at::Tensor &t, int64_t d, int64_t contiguous) {
    return t.size(d) > 1 ? t.stride(d) : contiguous;
}

int64_t compress(const at::Tensor &state_cache, const at::Tensor &token_to_req_in, const at::Tensor &positions_in,
                 const at::Tensor &boundary_in, const at::Tensor &block_table, const at::Tensor &rms_norm_weight,
                 const at::Tensor &cos_sin_cache, const at::Tensor &slots_in, at::Tensor &kv_cache,
                 int64_t block_size, int64_t compress_ratio, double rms_norm_eps, int64_t nope_format,
                 int64_t overlap, int64_t cos_sin_layout, int64_t kv_block_size, int64_t stream, int64_t rotate,
                 const std::optional<at::Tensor> &score_bias) {
    if (lib.compress == nullptr) {
        message = "kvcompress torch extension: init() was not called";
        return -KVC_ERROR_GENERIC;
    }
    try {
        const c10::Device dev = kv_cache.device();
        check("kv_cache", kv_cache, at::kByte, 2, dev);
        const bool bf16 = state_cache.scalar_type() == at::kBFloat16;
        check("state_cache", state_cache, bf16 ? at::kBFloat16 : at::kFloat, 3, dev);
        // the head width follows from the slot format (SPEC 9); the library checks the pairs
        const int64_t head_dim = nope_format >= KVC_INDEXER_FP8 && nope_format <= KVC_INDEXER_MXFP4 ? 128 : 512;
        const int64_t slot_bytes = head_dim == 128 ? (nope_format == KVC_INDEXER_FP8 ? 132 : 68) : KVC_SLOT_BYTES;
        if (score_bias) {
            check("score_bias", *score_bias, at::kFloat, 2, dev);
            if (score_bias->size(0) != compress_ratio || score_bias->size(1) != state_cache.size(2) / 2)
                refuse(KVC_ERROR_BAD_SHAPE, "score_bias: shape (" + std::to_string(score_bias->size(0)) + ", " +
                                                std::to_string(score_bias->size(1)) +
                                                "), expected (compress_ratio, state_width / 2) = (" +
                                                std::to_string(compress_ratio) + ", " +
                                                std::to_string(state_cache.size(2) / 2) + ")");
        }
        at::Tensor t2r = index_1d("token_to_req", token_to_req_in, at::kInt, dev);
        at::Tensor pos = index_1d("positions", positions_in, at::kLong, dev);
        at::Tensor bidx = index_1d("boundary_token_indices", boundary_in, at::kLong, dev);
        at::Tensor slots = index_1d("kv_slot_mapping", slots_in, at::kLong, dev);
        check("block_table", block_table, at::kInt, 2, dev);
        check("rms_norm_weight", rms_norm_weight, at::kBFloat16, 1, dev);
        check("cos_sin_cache", cos_sin_cache, at::kFloat, 2, dev);
        if (rms_norm_weight.size(0) != head_dim)
            refuse(KVC_ERROR_BAD_SHAPE, "rms_norm_weight: " + std::to_string(rms_norm_weight.size(0)) +
                                            " values, expected " + std::to_string(head_dim));
        if (cos_sin_cache.size(1) != 64)
            refuse(KVC_ERROR_BAD_SHAPE, "cos_sin_cache: rows of " + std::to_string(cos_sin_cache.size(1)) +
                                            ", expected 64");
        const int64_t n_tok = t2r.size(0);
        for (const auto &[name, t] : {std::pair<const char *, const at::Tensor &>{"positions", pos},
                                      {"kv_slot_mapping", slots}})
            if (t.size(0) != n_tok)
                refuse(KVC_ERROR_BAD_SHAPE, std::string(name) + ": " + std::to_string(t.size(0)) +
                                                " tokens, token_to_req has " + std::to_string(n_tok));
        if (kv_cache.size(0) > 0 && kv_block_size >= 1 && kv_block_size <= INT64_MAX / slot_bytes &&
            kv_cache.size(1) < slot_bytes * kv_block_size)
            refuse(KVC_ERROR_BAD_SHAPE, "kv_cache: pages of " + std::to_string(kv_cache.size(1)) +
                                            " bytes (kv_cache.size(1)), expected >= " + std::to_string(slot_bytes) +
                                            " * kv_block_size = " + std::to_string(slot_bytes * kv_block_size));
        if (state_cache.size(1) != block_size)
            refuse(KVC_ERROR_BAD_SHAPE, "state_cache: " + std::to_string(state_cache.size(1)) +
                                            " tokens per block, block_size is " + std::to_string(block_size));
        if (!dev.is_cuda() && !dev.is_cpu())
            refuse(KVC_ERROR_BAD_PARAMETER, "tensors on " + dev.str() + ": expected cpu or cuda");

        kvc_args a;
        lib.args_init(&a);
        a.state_cache = static_cast<const float *>(state_cache.const_data_ptr()); // (bf16 bits: state_dtype)
        a.state_dtype = bf16 ? KVC_STATE_BFLOAT16 : KVC_STATE_FLOAT32;
        a.head_dim = head_dim;
        a.rotate = static_cast<kvc_rotation>(rotate);
        if (score_bias) {
            a.score_bias = score_bias->const_data_ptr<float>();
            a.score_bias_stride = stride_or(*score_bias, 0, score_bias->size(1));
        }
        a.num_blocks = state_cache.size(0);
        a.block_size = block_size;
        a.state_width = state_cache.size(2);
        a.state_stride_token = stride_or(state_cache, 1, a.state_width);
        a.state_stride_block = stride_or(state_cache, 0, block_size * a.state_stride_token);
        a.token_to_req = t2r.const_data_ptr<int32_t>();
        a.positions = pos.const_data_ptr<int64_t>();
        a.kv_slot_mapping = slots.const_data_ptr<int64_t>();
        a.num_tokens = n_tok;
        a.boundary_token_indices = bidx.const_data_ptr<int64_t>();
        a.num_outputs = bidx.size(0);
        a.block_table = block_table.const_data_ptr<int32_t>();
        a.num_reqs = block_table.size(0);
        a.blocks_per_req = block_table.size(1);
        a.block_table_stride = stride_or(block_table, 0, block_table.size(1));
        a.rms_norm_weight = static_cast<const uint16_t *>(rms_norm_weight.const_data_ptr());
        a.cos_sin_cache = cos_sin_cache.const_data_ptr<float>();
        a.max_pos = cos_sin_cache.size(0);
        a.cos_sin_stride = stride_or(cos_sin_cache, 0, 64);
        a.kv_cache = kv_cache.mutable_data_ptr<uint8_t>();
        a.num_pages = kv_cache.size(0);
        a.page_stride = stride_or(kv_cache, 0, kv_cache.size(1));
        a.kv_block_size = kv_block_size;
        a.compress_ratio = compress_ratio;
        a.rms_norm_eps = static_cast<float>(rms_norm_eps);
        a.nope_format = static_cast<kvc_nope_format>(nope_format);
        a.overlap = static_cast<kvc_overlap>(overlap);
        a.cos_sin_layout = static_cast<kvc_cos_sin_layout>(cos_sin_layout);

        kvc_exec e;
        lib.exec_init(&e);
        if (dev.is_cuda()) {
            e.backend = KVC_BACKEND_CUDA;
            e.device = dev.index();
            e.stream = reinterpret_cast<void *>(static_cast<intptr_t>(stream));
        } else {
            e.backend = KVC_BACKEND_CPU;
        }
        kvc_report r;
        return static_cast<int64_t>(lib.compress(&a, &e, &r));
    } catch (const Refused &x) {
        return -static_cast<int64_t>(x.status);
    }
}

void init(uintptr_t compress_ptr, uintptr_t args_init_ptr, uintptr_t exec_init_ptr) {
    lib.compress = reinterpret_cast<compress_fn>(compress_ptr);
    lib.args_init = reinterpret_cast<init_fn>(args_init_ptr);
    lib.exec_init = reinterpret_cast<init_fn>(exec_init_ptr);
}

std::string last_message() { return message; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("init", &init, "hand over kvc_compress, kvc_args_init and kvc_exec_init (addresses)");
    m.def("compress", &compress, "one call; returns 0, a kvc_status (> 0) or minus a refused check's status");
    m.def("last_message", &last_message, "the message of the last refused check on this thread");
    m.def("header_version", [] { return KVC_VERSION_NUMBER; }, "KVC_VERSION_NUMBER of the header it was built with");
}
