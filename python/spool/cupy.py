"""spool as CuPy's device-memory allocator.

    import cupy
    import spool.cupy
    spool.cupy.install()    # cupy.cuda.set_allocator(spool.cupy.allocator)
    ...
    spool.cupy.uninstall()  # CuPy's allocator from before install() again

Every CuPy array is then a buffer of spool's pool for its device, the same pool that PyTorch's
tensors use under spool.torch (and Numba's arrays under spool.numba): allocated and freed in
stream order on CuPy's current stream at allocation time (the stream is kept alive until the
free). CuPy's own memory pool is bypassed, as with any allocator given to
cupy.cuda.set_allocator. Running out of memory raises cupy.cuda.memory.OutOfMemoryError with
spool's message. stats() counts CuPy's bytes in "torch_bytes_in_use" (the plug-in's count of
what the adapters hold).
"""
try:
    import cupy
except ImportError as e:
    raise ImportError(f"spool.cupy needs CuPy, which is not installed here (pip install "
                      f"cupy-cuda12x or cupy-cuda13x, for your CUDA): {e}") from e

from . import _lib
from ._lib import stats

__all__ = ["allocator", "install", "stats", "uninstall"]

_previous = []  # the allocator CuPy had before the first install(), while installed


def _out_of_memory(nbytes, message):
    """cupy.cuda.memory.OutOfMemoryError (what CuPy code catches) carrying spool's message."""
    try:
        error = cupy.cuda.memory.OutOfMemoryError(nbytes, 0)
    except Exception:  # another CuPy's signature: a plain MemoryError still says it all
        return MemoryError(message)
    error.args = (message,)
    return error


def allocator(nbytes):
    """A cupy.cuda.MemoryPointer to nbytes from spool, on CuPy's current device and stream.

    Raises cupy.cuda.memory.OutOfMemoryError (spool is out of memory, or PyTorch's memory
    fraction would be passed) or RuntimeError, with spool's message.
    """
    device = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream()
    try:
        buf = _lib.Buffer(nbytes, device, stream, stream.ptr)
    except MemoryError as e:
        raise _out_of_memory(nbytes, str(e)) from None
    owner = buf if buf.ptr else None  # 0 bytes: nothing to free
    memory = cupy.cuda.UnownedMemory(buf.ptr, nbytes, owner, device_id=device)
    return cupy.cuda.MemoryPointer(memory, 0)


def install(conf=None, lib=None):
    """Makes spool CuPy's allocator (cupy.cuda.set_allocator(allocator)). Returns the library's
    path.

    conf: spool config text for the pools to come, as spool.torch.install takes it; only before
    the first pool is made (by any adapter), else RuntimeError. lib: see spool.library_path().
    """
    cdll = _lib.load(lib)
    if conf is not None:
        _lib.configure(cdll, conf)
    if not _previous:
        _previous.append(_current_allocator())
    cupy.cuda.set_allocator(allocator)
    return _lib.loaded_path()


def _current_allocator():
    """What CuPy allocates with now: get_allocator() where CuPy has it, else its default pool."""
    get = getattr(cupy.cuda, "get_allocator", None)
    return get() if get else cupy.get_default_memory_pool().malloc


def uninstall():
    """Gives CuPy back the allocator it had before install() (its default memory pool unless the
    program had set another). Arrays made from spool stay valid and go back to spool's pool when
    they are freed. Without a preceding install() nothing changes."""
    if _previous:
        cupy.cuda.set_allocator(_previous.pop())
