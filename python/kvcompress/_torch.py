"""The torch fast path: _torch_ext.cpp, built on first use and cached.

torch.utils.cpp_extension compiles it once per torch version and source
(about a minute; cached under $TORCH_EXTENSIONS_DIR, default
~/.cache/torch_extensions).  It needs a C++ compiler and ninja, not the CUDA
toolkit.  Where it cannot be built, or with KVCOMPRESS_TORCH_EXT=0, the
drop-in takes the ctypes path (same bytes, more host time per call) and
:func:`status` says why.
"""
import os
import warnings

_EXT = None
_WHY = None


def _include_dirs():
    here = os.path.dirname(os.path.abspath(__file__))
    # the wheel installs kvcompress.h beside this file; a source tree has it in include/
    return [d for d in (here, os.path.join(os.path.dirname(os.path.dirname(here)), "include"))
            if os.path.exists(os.path.join(d, "kvcompress.h"))]


def _build(lib):
    import ctypes

    import hashlib

    from torch.utils import cpp_extension
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "_torch_ext.cpp")
    inc = _include_dirs()
    # torch's cache knows the source, not the header it includes: the name
    # carries a hash of both, so a changed kvc_args never meets a stale build
    h = hashlib.sha1()
    for path in [src] + [os.path.join(d, "kvcompress.h") for d in inc[:1]]:
        with open(path, "rb") as f:
            h.update(f.read())
    ext = cpp_extension.load(name="kvcompress_torch_ext_" + h.hexdigest()[:12], sources=[src],
                             extra_include_paths=inc, extra_cflags=["-O2"], verbose=False)
    if ext.header_version() != lib.kvc_version_number():  # a library from elsewhere ($KVCOMPRESS_LIB)
        raise ImportError(f"the extension was built with kvcompress.h {ext.header_version()}, "
                          f"the loaded library is {lib.kvc_version_number()}")
    addr = [ctypes.cast(f, ctypes.c_void_p).value for f in (lib.kvc_compress, lib.kvc_args_init, lib.kvc_exec_init)]
    ext.init(*addr)
    return ext


def get(lib):
    """The extension module, or None (then status() says why)."""
    global _EXT, _WHY
    if _EXT is None:
        if os.environ.get("KVCOMPRESS_TORCH_EXT", "1") == "0":
            _EXT, _WHY = False, "disabled by KVCOMPRESS_TORCH_EXT=0"
        else:
            try:
                _EXT = _build(lib)
            except Exception as e:  # no compiler, no ninja, no headers: the ctypes path still works
                _EXT, _WHY = False, f"{type(e).__name__}: {e}"
                warnings.warn(f"kvcompress: the torch extension could not be built ({_WHY}); using the "
                              "slower ctypes path (set KVCOMPRESS_TORCH_EXT=0 to skip the attempt)",
                              RuntimeWarning, stacklevel=3)
    return _EXT or None


def status():
    """'extension' when the fast path is in use, else why not."""
    return "extension" if _EXT else (_WHY or "not built yet")
