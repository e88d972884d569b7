"""spool, the stream-ordered CUDA allocator, for Python GPU programs.

    pip install .          # from spool's source tree: libspool_torch.so lands inside the package

    import spool.torch; spool.torch.install()              # PyTorch, before the first CUDA tensor
    import spool.cupy;  spool.cupy.install()               # CuPy: cupy.cuda.set_allocator
    import spool.numba; spool.numba.install()              # Numba: its external memory manager
    print(spool.stats(0)["bytes_reserved_peak"])           # spool's counters for device 0

Every adapter allocates through the same libspool_torch.so (ctypes, no extension module), so
PyTorch, CuPy and Numba in one process share one spool pool per device: memory one of them frees
is reused by the others, and stats() counts them all. The library is found inside this package
(SPOOL_TORCH_LIB overrides it; see library_path()). C code in the same process shares the pools
too: it links to that library, which exports spool's C API, and calls spool_torch_pool
(headers in include_dir()).

Only the standard library is imported here; spool.torch, spool.cupy and spool.numba import their
framework when they are imported (ImportError naming it when it is missing).
"""
from . import _lib
from ._lib import LIBRARY, include_dir, library_path

# Not __version__: `from spool import *` must work where the library cannot be found.
__all__ = ["stats", "library_path", "include_dir", "LIBRARY"]


def stats(device=0, lib=None):
    """spool's statistics of device's pool, as a dict.

    Keys: spool_stats's fields (bytes_in_use, bytes_in_use_peak, buffers_in_use, bytes_reserved,
    bytes_reserved_peak, allocs, frees, ooms, cache_hits, ...; see include/spool/spool.h),
    "device", "device_free" and "device_total" (cudaMemGetInfo), and the plug-in's own:
    "torch_bytes_in_use" (the bytes the adapters hold: PyTorch's tensors, CuPy's and Numba's
    arrays), "torch_limit" (torch.cuda.set_per_process_memory_fraction's limit in bytes, or
    None) and "free_failures". device: 0, 1, "cuda:1" or a torch.device. lib: see
    library_path().

    Raises RuntimeError when the device has no pool yet (it is made at the device's first
    allocation through any adapter).
    """
    return _lib.stats(device, lib)


def __getattr__(name):
    # The version is the loaded C library's (spool_version_string), read when first asked for,
    # so that `import spool` works before the library can be found.
    if name == "__version__":
        try:
            version = _lib.load().spool_torch_version().decode()
        except OSError as e:  # FileNotFoundError too: no library, no version to report
            raise AttributeError(f"spool.__version__: {e}") from e
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module 'spool' has no attribute {name!r}")
