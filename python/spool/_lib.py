"""Finding and loading libspool_torch.so, the one library every adapter of the package calls.

PyTorch, CuPy and Numba in one process must reach the same copy of the library, or each would
make its own pool per device: so the library is loaded once, and a different path later is an
error. Only the standard library is imported here.
"""
import ctypes
import glob
import json
import os
import sys
import threading

LIBRARY = "libspool_torch.so"
SPOOL_ERR_OOM = 2  # spool_status values (include/spool/spool.h)
SPOOL_ERR_CONFIG = 6

lock = threading.Lock()
_lib = None       # the loaded library (ctypes.CDLL) and its path
_lib_path = None

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    """Where the library is looked for, in order, when no lib is given."""
    env = os.environ.get("SPOOL_TORCH_LIB")
    if env:
        yield env, "SPOOL_TORCH_LIB"
        return  # an explicit choice: no guessing past it
    yield os.path.join(_HERE, LIBRARY), "inside the spool package"  # a wheel: pip install .
    python_dir = os.path.dirname(_HERE)
    yield os.path.join(python_dir, LIBRARY), "next to spool_torch.py"
    # CMake's install: <prefix>/share/spool/python/spool/ and <prefix>/lib*/libspool_torch.so
    prefix = os.path.dirname(os.path.dirname(os.path.dirname(python_dir)))
    for path in sorted(glob.glob(os.path.join(prefix, "lib*", LIBRARY))):
        yield path, "the install prefix"
    # a source checkout: python/spool/ next to build/<dir>/plugin/; the newest build first
    builds = glob.glob(os.path.join(os.path.dirname(python_dir), "build", "*", "plugin", LIBRARY))
    for path in sorted(builds, key=os.path.getmtime, reverse=True):
        yield path, "the source tree's build folders"


def library_path(lib=None):
    """The path of libspool_torch.so that the package loads.

    lib (a path) wins; else the environment variable SPOOL_TORCH_LIB; else the library inside
    the package (where `pip install .` puts it), next to spool_torch.py, in the install prefix,
    or in the source tree's build/*/plugin/ folders (newest first). Raises FileNotFoundError
    naming every place tried.
    """
    if lib is not None:
        path = os.fspath(lib)
        if os.path.isfile(path):
            return os.path.abspath(path)
        raise FileNotFoundError(f"spool: lib={path!r} is not a file")
    tried = []
    for path, where in _candidates():
        if os.path.isfile(path):
            return os.path.abspath(path)
        tried.append(f"{path} ({where})")
    raise FileNotFoundError(
        "spool: libspool_torch.so not found; install the package with `pip install .` from "
        "spool's source tree, or build it with spool's CMake (it lands in <build>/plugin/) and "
        "pass lib=<path> or set SPOOL_TORCH_LIB. Tried: " + ("; ".join(tried) or "nothing"))


def include_dir():
    """The folder of C headers for code in the process that shares the package's pools:
    spool/spool.h (spool's C API, which the library exports) and spool_torch.h
    (spool_torch_pool). C code compiles with -I<this>, links to library_path() instead of
    libspool, and calls spool_torch_pool(device, &pool). Inside the package (pip install .);
    raises FileNotFoundError elsewhere (a source checkout has include/ and plugin/ instead)."""
    path = os.path.join(_HERE, "include")
    if os.path.isfile(os.path.join(path, "spool", "spool.h")):
        return path
    raise FileNotFoundError(f"spool: no C headers at {path}: they come with `pip install .`; "
                            "in a source checkout use include/, <build>/include/ and plugin/")


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
    # spool_torch_alloc throws C++ exceptions, which ctypes cannot catch: the adapters call the
    # status-returning spool_torch_try_alloc instead.
    cdll.spool_torch_try_alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                           ctypes.c_int, ctypes.c_void_p]
    cdll.spool_torch_try_alloc.restype = ctypes.c_int
    cdll.spool_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                      ctypes.c_void_p]
    cdll.spool_torch_free.restype = None


def load(lib=None):
    """The library, loaded once per process; a different lib later is an error."""
    global _lib, _lib_path
    path = library_path(lib) if (lib is not None or _lib is None) else _lib_path
    with lock:
        if _lib is not None:
            if os.path.realpath(path) != os.path.realpath(_lib_path):
                raise RuntimeError(f"spool: {_lib_path} is loaded already; cannot also "
                                   f"use {path}")
            return _lib
        cdll = ctypes.CDLL(path)
        _declare(cdll)
        _lib, _lib_path = cdll, path
        return cdll


def loaded_path():
    """The path of the library loaded so far, or None."""
    return _lib_path


def last_error(cdll):
    return cdll.spool_torch_last_error().decode(errors="replace")


def configure(cdll, conf):
    """Sets the config of the pools to come (defaults, SPOOL_CONF, conf); ValueError if bad."""
    text = None if conf is None else str(conf).encode()
    status = cdll.spool_torch_configure(text)
    if status == SPOOL_ERR_CONFIG:
        raise ValueError(last_error(cdll))
    if status != 0:
        raise RuntimeError(last_error(cdll))


def alloc(size, device, stream):
    """size bytes on device in stream order on stream (a handle as an int; 0: the legacy default
    stream), from the device's pool, shared with PyTorch. Returns the address (0 for size 0).
    MemoryError when spool is out of memory, RuntimeError for other failures, both with
    spool's message."""
    cdll = load()
    out = ctypes.c_void_p()
    status = cdll.spool_torch_try_alloc(ctypes.byref(out), size, device, stream or None)
    if status == SPOOL_ERR_OOM:
        raise MemoryError(last_error(cdll))
    if status != 0:
        raise RuntimeError(last_error(cdll))
    return out.value or 0


def free(ptr, size, device, stream):
    """Frees what alloc gave, in stream order on stream; never raises (spool_torch_free writes
    a failure to stderr and counts it in stats()["free_failures"])."""
    load().spool_torch_free(ptr, size, device, stream or None)


class Buffer:
    """A buffer of the pool that frees itself when the last reference goes: the owner that CuPy's
    UnownedMemory and Numba's allocations hold. stream: the framework's stream object, kept
    alive so that it outlives the buffer's free in stream order on it (None: the legacy default
    stream); handle: its address as an int."""

    __slots__ = ("ptr", "size", "device", "stream", "handle")

    def __init__(self, size, device, stream=None, handle=0):
        self.ptr = 0
        self.ptr = alloc(size, device, handle)
        self.size, self.device, self.stream, self.handle = size, device, stream, handle

    def __del__(self):
        # At interpreter exit the process gives its memory back anyway, and CUDA may already be
        # shutting down: no call then.
        if self.ptr and not sys.is_finalizing():
            free(self.ptr, self.size, self.device, self.handle)
            self.ptr = 0


def device_index(device):
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
    raise ValueError(f"spool: not a CUDA device: {device!r}")


def stats(device=0, lib=None):
    """spool's statistics of device's pool, as a dict (see spool.stats)."""
    cdll = load(lib)
    index = device_index(device)
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        status = cdll.spool_torch_stats_json(index, buf, size)
        if status == 0:
            return json.loads(buf.value.decode())
        message = last_error(cdll)
        if "needs" not in message or size >= 1 << 20:
            raise RuntimeError(message)
        size *= 4
