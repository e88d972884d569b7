"""spool as PyTorch's CUDA allocator.

    import torch
    import spool.torch
    spool.torch.install(conf="release_threshold=4GiB")  # before the first CUDA tensor
    ...                                                  # every CUDA tensor is a spool buffer
    print(spool.torch.stats()["bytes_reserved_peak"])    # spool's counters for device 0

install() loads libspool_torch.so (inside the package after `pip install .`, or built by spool's
CMake in <build>/plugin/) with ctypes and hands its functions to
torch.cuda.memory.CUDAPluggableAllocator: one spool pool per device, made at the device's first
allocation from spool's defaults, then the plug-in's ("chunk_idle=1000000": free heap chunks wait
for empty_cache or an out-of-memory, as PyTorch's own segments do), then the SPOOL_CONF
environment variable, then `conf`. Tensor.record_stream becomes spool's cross-stream hand-off,
torch.cuda.empty_cache() trims the pools (after a device synchronize),
torch.cuda.set_per_process_memory_fraction limits the bytes tensors hold, and running out of
memory raises torch.OutOfMemoryError with spool's message (sizes, pool and device figures).
spool.cupy and spool.numba allocate from the same pools.

PyTorch's own memory statistics (torch.cuda.memory_allocated, memory_stats, ...) are not
available under a pluggable allocator: read stats() instead.

torch is imported by install(), not by this module, so it loads on machines without PyTorch.
"""
import ctypes
import threading

from . import _lib
from ._lib import LIBRARY, library_path, stats

__all__ = ["install", "stats", "library_path"]

_lock = threading.Lock()
_installed = None  # (conf, path) of the install() that succeeded
# Kept for the tests and callers of spool_torch, which used these names.
_load = _lib.load
_configure = _lib.configure

_LATE = (
    "spool.torch.install() must run before PyTorch initializes CUDA, and CUDA is already "
    "initialized in this process: a CUDA tensor, a model moved to the GPU, or a torch.cuda call "
    "such as torch.cuda.init() came first. PyTorch cannot swap its allocator after that. Call "
    "spool.torch.install() right after `import torch`, before anything touches the GPU.")


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def install(conf=None, lib=None):
    """Makes spool PyTorch's CUDA allocator for this process. Returns the library's path.

    conf: spool config text (e.g. "release_threshold=4GiB, max_size=60GiB"; see spool's README),
    applied on top of spool's and the plug-in's defaults and the SPOOL_CONF environment
    variable; the config's `device` is ignored (every device gets its own pool). lib: the path
    of libspool_torch.so (default: see library_path()).

    To record what PyTorch asks of spool, put the trace key in conf (or set SPOOL_TRACE):
    install(conf="trace=/tmp/torch-%n.sptr") writes one trace per device's pool (%n: the pool's
    number), written as its blocks fill, at torch.cuda.empty_cache() and at exit; spool-trace,
    spool-replay and spool-advise read it (docs/trace.md).

    Call it before anything initializes CUDA in PyTorch (the first CUDA tensor, .cuda(),
    torch.cuda.init(), ...): PyTorch's allocator cannot be replaced after that, and install()
    raises RuntimeError saying so. A second call with the same conf (and lib) does nothing; with
    another, RuntimeError.

    Raises ImportError (no PyTorch), RuntimeError (CUDA already initialized, no CUDA device, a
    second install with other settings), ValueError (bad config: spool's message names the key),
    FileNotFoundError or OSError (the library cannot be found or loaded).
    """
    global _installed
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"spool.torch.install() needs PyTorch: {e}") from e
    cdll = _lib.load(lib)
    path = _lib.loaded_path()
    with _lock:
        if _installed is not None:
            if _installed == (conf, path):
                return path
            raise RuntimeError(
                f"spool.torch.install(): already installed with conf={_installed[0]!r} from "
                f"{_installed[1]}; PyTorch's allocator can be chosen once per process")
        if torch.cuda.is_initialized():
            raise RuntimeError(_LATE)
        if not torch.cuda.is_available():
            raise RuntimeError("spool.torch.install(): PyTorch sees no CUDA device")
        _lib.configure(cdll, conf)
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            path, "spool_torch_alloc", "spool_torch_free")
        hooks = allocator.allocator()
        hooks.set_init_fn(_address(cdll.spool_torch_init))
        hooks.set_reset_fn(_address(cdll.spool_torch_empty_cache))
        hooks.set_memory_fraction_fn(_address(cdll.spool_torch_set_memory_fraction))
        hooks.set_record_stream_fn(_address(cdll.spool_torch_record_stream))
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            if "already initialized" in str(e):
                raise RuntimeError(_LATE) from e
            raise
        _installed = (conf, path)
        return path
