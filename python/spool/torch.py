"""spool as PyTorch's CUDA allocator.

    import torch
    import spool.torch
    spool.torch.install(conf="release_threshold=4GiB")  # before the first CUDA tensor
    ...                                                  # every CUDA tensor is a spool buffer
    print(spool.torch.native())                          # True: PyTorch treats spool as its own
    print(torch.cuda.memory_stats()["reserved_bytes.all.peak"])  # spool's bytes_reserved_peak
    print(spool.torch.stats()["bytes_reserved_peak"])    # spool's counters for device 0

install() loads libspool_torch.so (inside the package after `pip install .`, or built by spool's
CMake in <build>/plugin/) and makes it PyTorch's CUDA allocator: one spool pool per device, made
at the device's first allocation from spool's defaults, then the plug-in's ("chunk_idle=1000000":
free heap chunks wait for empty_cache or an out-of-memory, as PyTorch's own segments do), then
the SPOOL_CONF environment variable, then `conf`.

Two ways in, both over the same library and pools:

- The allocator class (the default): a C++ class derived from PyTorch's CUDAPluggableAllocator
  (_torch_native.cpp, shipped in the package), compiled against the installed PyTorch at the
  first install() and kept in a cache folder (SPOOL_CACHE_DIR, else ~/.cache/spool; see
  spool._native). Beyond the plug-in it answers what the pluggable interface refuses:
  torch.backends.cudnn.benchmark (cacheInfo: the largest block spool could serve now),
  torch.cuda.memory_stats() and the functions built on it (memory_allocated, max_memory_reserved,
  memory_summary, reset_peak_memory_stats, reset_accumulated_memory_stats: spool's counters, see
  below), and CUDA graphs with torch.cuda.graph, pools shared between graphs included
  (allocations under capture are graph-owned memory, and the class keeps which live pointers
  belong to which pool). Built and tested with PyTorch 2.11.0 (CUDA 13.0) on an H200. On
  another version the class is compiled against that version's headers; where that fails, or
  PyTorch's C++ headers or a C++ compiler are missing, install() warns once, naming why, and
  takes the pluggable path.
- The pluggable path (install(native=False), or SPOOL_TORCH_NATIVE=0): the plug-in's C functions
  handed to torch.cuda.memory.CUDAPluggableAllocator. PyTorch's memory statistics,
  cudnn.benchmark and graph pools raise there (PyTorch's "does not yet support" errors): read
  stats() instead.

Either way Tensor.record_stream becomes spool's cross-stream hand-off,
torch.cuda.empty_cache() trims the pools (after a device synchronize),
torch.cuda.set_per_process_memory_fraction limits the bytes tensors hold, and running out of
memory raises torch.OutOfMemoryError with spool's message (sizes, pool and device figures).
spool.cupy and spool.numba allocate from the same pools.

memory_stats() under the class: allocated_bytes, active_bytes and requested_bytes are the bytes
asked for by live buffers (spool's bytes_in_use, its peak, and bytes allocated and freed since
the last reset_accumulated_memory_stats); allocation and active count buffers (buffers_in_use,
allocs, frees); reserved_bytes is what the cudaMemPool holds (bytes_reserved and
bytes_reserved_peak, the pool's own high-water mark: memory_stats()["reserved_bytes.all.peak"]
is stats()["bytes_reserved_peak"]); num_alloc_retries and num_ooms are oom_retries and ooms;
num_device_alloc and num_device_free count the heap chunks taken from and given back to the
cudaMemPool. spool keeps one pool for every size, reported as PyTorch's large pool (equal to
"all"); the small-pool figures, segments and inactive splits are zero. The counters include
what CuPy and Numba allocate from the same pool.

CUDA graphs under the class: torch.cuda.graph and torch.compile(mode="reduce-overhead") (CUDA
graph trees too). A capture's allocations come from graph pools the class keeps, of spool
buffers allocated outside the capture, so the graph's kernels (Triton's among them) get memory
the driver knows; a released pool's blocks go back to spool at the next empty_cache() or when
spool runs out of memory. memory_snapshot() and the memory history
are PyTorch's own.

torch is imported by install(), not by this module, so it loads on machines without PyTorch.
"""
import ctypes
import os
import threading
import warnings

from . import _lib
from . import _native
from ._lib import LIBRARY, library_path, stats

__all__ = ["install", "native", "stats", "library_path"]

_lock = threading.Lock()
_installed = None  # (conf, path) of the install() that succeeded
_class = None      # the allocator class's library, when it is PyTorch's allocator
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


def _want_native(native):
    """True, False, or None (the class if it builds) from the argument, else SPOOL_TORCH_NATIVE."""
    if native is not None:
        return bool(native)
    env = os.environ.get("SPOOL_TORCH_NATIVE", "").strip().lower()
    if env in ("", "auto"):
        return None
    if env in ("0", "off", "false", "no"):
        return False
    if env in ("1", "on", "true", "yes"):
        return True
    raise ValueError(f"SPOOL_TORCH_NATIVE={env!r}: use 1, 0 or auto")


def _swap(fn):
    """Runs PyTorch's allocator swap, turning its late-swap error into the clear one."""
    try:
        fn()
    except RuntimeError as e:
        if "already initialized" in str(e):
            raise RuntimeError(_LATE) from e
        raise


def _install_pluggable(torch, cdll, path):
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        path, "spool_torch_alloc", "spool_torch_free")
    hooks = allocator.allocator()
    hooks.set_init_fn(_address(cdll.spool_torch_init))
    hooks.set_reset_fn(_address(cdll.spool_torch_empty_cache))
    hooks.set_memory_fraction_fn(_address(cdll.spool_torch_set_memory_fraction))
    hooks.set_record_stream_fn(_address(cdll.spool_torch_record_stream))
    _swap(lambda: torch.cuda.memory.change_current_allocator(allocator))


def _built_class(torch, cdll, path, want):
    """The allocator class's library, or None (after one warning) where it cannot be had and
    want is None."""
    try:
        return _native.load(torch, path, cdll)
    except _native.Unavailable as e:
        if want:
            raise RuntimeError(f"spool.torch.install(native=True): {e}") from e
        warnings.warn(
            f"spool.torch: PyTorch's allocator is spool through CUDAPluggableAllocator, without "
            f"spool's allocator class ({e}); torch.cuda.memory_stats, cudnn.benchmark and CUDA "
            "graph pools are unavailable there. install(native=False) or SPOOL_TORCH_NATIVE=0 "
            "chooses that path without this warning", RuntimeWarning, stacklevel=3)
        return None


def install(conf=None, lib=None, native=None):
    """Makes spool PyTorch's CUDA allocator for this process. Returns the library's path.

    conf: spool config text (e.g. "release_threshold=4GiB, max_size=60GiB"; see spool's README),
    applied on top of spool's and the plug-in's defaults and the SPOOL_CONF environment
    variable; the config's `device` is ignored (every device gets its own pool). lib: the path
    of libspool_torch.so (default: see library_path()).

    native: None (default) installs spool's allocator class (see the module's docstring),
    building it at the first call (a few tens of seconds, then cached); where it cannot be
    built, one RuntimeWarning names why and the pluggable path is taken. True: the class or
    RuntimeError. False: the pluggable path. When native is None the environment variable
    SPOOL_TORCH_NATIVE (1, 0 or auto) decides. native() says which path is in use.

    To record what PyTorch asks of spool, put the trace key in conf (or set SPOOL_TRACE):
    install(conf="trace=/tmp/torch-%n.sptr") writes one trace per device's pool (%n: the pool's
    number), written as its blocks fill, at torch.cuda.empty_cache() and at exit; spool-trace,
    spool-replay and spool-advise read it (docs/trace.md).

    Call it before anything initializes CUDA in PyTorch (the first CUDA tensor, .cuda(),
    torch.cuda.init(), ...): PyTorch's allocator cannot be replaced after that, and install()
    raises RuntimeError saying so. A second call with the same conf (and lib) does nothing; with
    another, RuntimeError.

    Raises ImportError (no PyTorch), RuntimeError (CUDA already initialized, no CUDA device, a
    second install with other settings, native=True and no class), ValueError (bad config:
    spool's message names the key; a bad SPOOL_TORCH_NATIVE), FileNotFoundError or OSError (the
    library cannot be found or loaded).
    """
    global _installed, _class
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"spool.torch.install() needs PyTorch: {e}") from e
    want = _want_native(native)
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
        built = _built_class(torch, cdll, path, want) if want is not False else None
        if built is not None:
            _swap(lambda: _native.install(built))
        else:
            _install_pluggable(torch, cdll, path)
        _installed, _class = (conf, path), built
        return path


def native():
    """True when spool's allocator class is PyTorch's CUDA allocator in this process (install()
    took that path); False before install() and on the pluggable path."""
    return _class is not None and _native.active(_class)
