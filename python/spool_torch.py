"""spool as PyTorch's CUDA allocator.

    import torch
    import spool_torch
    spool_torch.install(conf="release_threshold=4GiB")  # before the first CUDA tensor
    ...                                                  # every CUDA tensor is a spool buffer
    print(spool_torch.stats()["bytes_reserved_peak"])    # spool's counters for device 0

install() loads libspool_torch.so (built by spool's CMake, in <build>/plugin/) with ctypes and
hands its functions to torch.cuda.memory.CUDAPluggableAllocator: one spool pool per device,
made at the device's first allocation from spool's defaults, then the plug-in's
("chunk_idle=1000000": free heap chunks wait for empty_cache or an out-of-memory, as PyTorch's
own segments do), then the SPOOL_CONF environment variable,
then `conf`. Tensor.record_stream becomes spool's cross-stream hand-off,
torch.cuda.empty_cache() trims the pools (after a device synchronize),
torch.cuda.set_per_process_memory_fraction limits the bytes tensors hold, and running out of
memory raises torch.OutOfMemoryError with spool's message (sizes, pool and device figures).

PyTorch's own memory statistics (torch.cuda.memory_allocated, memory_stats, ...) are not
available under a pluggable allocator: read stats() instead.

Only the standard library is imported here; torch is imported by install(), so this module loads
on machines without PyTorch.
"""
import ctypes
import glob
import json
import os
import threading

__all__ = ["install", "stats", "library_path"]

LIBRARY = "libspool_torch.so"
_SPOOL_ERR_CONFIG = 6  # spool_status values (include/spool/spool.h)

_lock = threading.Lock()
_lib = None        # the loaded library (ctypes.CDLL) and its path
_lib_path = None
_installed = None  # (conf, path) of the install() that succeeded

_LATE = (
    "spool_torch.install() must run before PyTorch initializes CUDA, and CUDA is already "
    "initialized in this process: a CUDA tensor, a model moved to the GPU, or a torch.cuda call "
    "such as torch.cuda.init() came first. PyTorch cannot swap its allocator after that. Call "
    "spool_torch.install() right after `import torch`, before anything touches the GPU.")


def _candidates():
    """Where the library is looked for, in order, when install() or stats() is given no lib."""
    env = os.environ.get("SPOOL_TORCH_LIB")
    if env:
        yield env, "SPOOL_TORCH_LIB"
        return  # an explicit choice: no guessing past it
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, LIBRARY), "next to spool_torch.py"
    # installed: <prefix>/share/spool/python/spool_torch.py and <prefix>/lib*/libspool_torch.so
    prefix = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    for path in sorted(glob.glob(os.path.join(prefix, "lib*", LIBRARY))):
        yield path, "the install prefix"
    # a source checkout: python/ next to build/<dir>/plugin/; the newest build first
    builds = glob.glob(os.path.join(os.path.dirname(here), "build", "*", "plugin", LIBRARY))
    for path in sorted(builds, key=os.path.getmtime, reverse=True):
        yield path, "the source tree's build folders"


def library_path(lib=None):
    """The path of libspool_torch.so that install() would load.

    lib (a path) wins; else the environment variable SPOOL_TORCH_LIB; else the library next to
    this file, in the install prefix above it, or in the source tree's build/*/plugin/ folders
    (newest first). Raises FileNotFoundError naming every place tried.
    """
    if lib is not None:
        path = os.fspath(lib)
        if os.path.isfile(path):
            return os.path.abspath(path)
        raise FileNotFoundError(f"spool_torch: lib={path!r} is not a file")
    tried = []
    for path, where in _candidates():
        if os.path.isfile(path):
            return os.path.abspath(path)
        tried.append(f"{path} ({where})")
    raise FileNotFoundError(
        "spool_torch: libspool_torch.so not found; build it with spool's CMake (it lands in "
        "<build>/plugin/) and pass lib=<path> or set SPOOL_TORCH_LIB. Tried: "
        + ("; ".join(tried) or "nothing"))


def _declare(cdll):
    """Argument and result types of the functions called through ctypes."""
    cdll.spool_torch_configure.argtypes = [ctypes.c_char_p]
    cdll.spool_torch_configure.restype = ctypes.c_int
    cdll.spool_torch_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    cdll.spool_torch_stats_json.restype = ctypes.c_int
    cdll.spool_torch_last_error.argtypes = []
    cdll.spool_torch_last_error.restype = ctypes.c_char_p
    cdll.spool_torch_version.argtypes = []
    cdll.spool_torch_version.restype = ctypes.c_char_p


def _load(lib=None):
    """The library, loaded once per process; a different lib later is an error."""
    global _lib, _lib_path
    path = library_path(lib) if (lib is not None or _lib is None) else _lib_path
    with _lock:
        if _lib is not None:
            if os.path.realpath(path) != os.path.realpath(_lib_path):
                raise RuntimeError(f"spool_torch: {_lib_path} is loaded already; cannot also "
                                   f"use {path}")
            return _lib
        cdll = ctypes.CDLL(path)
        _declare(cdll)
        _lib, _lib_path = cdll, path
        return cdll


def _last_error(cdll):
    return cdll.spool_torch_last_error().decode(errors="replace")


def _configure(cdll, conf):
    """Sets the config of the pools to come (defaults, SPOOL_CONF, conf); ValueError if bad."""
    text = None if conf is None else str(conf).encode()
    status = cdll.spool_torch_configure(text)
    if status == _SPOOL_ERR_CONFIG:
        raise ValueError(_last_error(cdll))
    if status != 0:
        raise RuntimeError(_last_error(cdll))


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def install(conf=None, lib=None):
    """Makes spool PyTorch's CUDA allocator for this process. Returns the library's path.

    conf: spool config text (e.g. "release_threshold=4GiB, max_size=60GiB"; see spool's README),
    applied on top of spool's and the plug-in's defaults and the SPOOL_CONF environment
    variable; the config's `device` is ignored (every device gets its own pool). lib: the path
    of libspool_torch.so (default: see library_path()).

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
        raise ImportError(f"spool_torch.install() needs PyTorch: {e}") from e
    cdll = _load(lib)
    with _lock:
        if _installed is not None:
            if _installed == (conf, _lib_path):
                return _lib_path
            raise RuntimeError(
                f"spool_torch.install(): already installed with conf={_installed[0]!r} from "
                f"{_installed[1]}; PyTorch's allocator can be chosen once per process")
        if torch.cuda.is_initialized():
            raise RuntimeError(_LATE)
        if not torch.cuda.is_available():
            raise RuntimeError("spool_torch.install(): PyTorch sees no CUDA device")
        _configure(cdll, conf)
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            _lib_path, "spool_torch_alloc", "spool_torch_free")
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
        _installed = (conf, _lib_path)
        return _lib_path


def _device_index(device):
    """An int from 0, "cuda", "cuda:1", torch.device("cuda", 1)."""
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if getattr(device, "type", None) is not None:
        return 0 if index is None else int(index)
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:"):
        return int(text[5:])
    raise ValueError(f"spool_torch: not a CUDA device: {device!r}")


def stats(device=0, lib=None):
    """spool's statistics of device's pool, as a dict.

    Keys: spool_stats's fields (bytes_in_use, bytes_in_use_peak, buffers_in_use, bytes_reserved,
    bytes_reserved_peak, allocs, frees, ooms, cache_hits, ...; see include/spool/spool.h),
    "device", "device_free" and "device_total" (cudaMemGetInfo), and the plug-in's own:
    "torch_bytes_in_use" (bytes tensors hold), "torch_limit" (the memory-fraction limit in
    bytes, or None) and "free_failures". device: 0, 1, "cuda:1" or a torch.device.

    Raises RuntimeError when the device has no pool yet (it is made at the device's first CUDA
    allocation, so before install() or before any tensor there is none).
    """
    cdll = _load(lib)
    index = _device_index(device)
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        status = cdll.spool_torch_stats_json(index, buf, size)
        if status == 0:
            return json.loads(buf.value.decode())
        message = _last_error(cdll)
        if "needs" not in message or size >= 1 << 20:
            raise RuntimeError(message)
        size *= 4
