"""spool as Numba's CUDA memory manager (an External Memory Management plugin).

    from numba import cuda
    import spool.numba
    spool.numba.install()   # cuda.set_memory_manager(spool.numba.SpoolNumbaManager)

or NUMBA_CUDA_MEMORY_MANAGER=spool.numba in the environment. Either must come before Numba makes
its CUDA context. Device arrays are then buffers of spool's pool for the context's device, the
same pool that PyTorch's tensors use under spool.torch (and CuPy's arrays under spool.cupy).
Numba's allocation interface carries no stream, so they are allocated and freed in stream order
on the legacy default stream. Host (pinned, mapped) memory stays Numba's own.
"""
import contextlib
import ctypes

try:
    from numba import cuda
    from numba.cuda import HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
except ImportError as e:
    raise ImportError(f"spool.numba needs Numba, which is not installed here (pip install "
                      f"numba, or numba-cuda): {e}") from e

from . import _lib
from ._lib import stats

__all__ = ["SpoolNumbaManager", "install", "stats"]


def _device_pointer(ptr):
    """ptr as the type Numba's driver layer takes: CUdeviceptr with NVIDIA's bindings, else a
    ctypes integer. Numba once chose between the two (USE_NV_BINDING); numba-cuda now has only
    NVIDIA's, and no switch (given a ctypes integer it fails in int() on the array's views)."""
    from numba.cuda.cudadrv import driver
    nvidia = getattr(driver, "USE_NV_BINDING", None)
    if nvidia is None:
        nvidia = hasattr(getattr(driver, "binding", None), "CUdeviceptr")
    if nvidia:
        return driver.binding.CUdeviceptr(ptr)
    return ctypes.c_uint64(ptr)


def _forget(manager, ptr, size):
    """The finalizer Numba calls once an array is gone: the free joins the manager's pending
    deallocations, as Numba's own allocator's do, so that it waits under cuda.defer_cleanup()
    and goes in Numba's batches; dropping the owner then frees the buffer. A context reset may
    have cleared the allocations first (at exit)."""
    allocations = manager.allocations

    def drop(key):
        if allocations:
            allocations.pop(key, None)

    def finalizer():
        manager.deallocations.add_item(drop, ptr, size)
    return finalizer


class SpoolNumbaManager(HostOnlyCUDAMemoryManager):
    """Numba's device allocations from spool's per-device pools."""

    def initialize(self):
        pass  # the device's pool is made at its first allocation

    def memalloc(self, size):
        device = self.context.device.id
        try:
            buf = _lib.Buffer(size, device)
        except MemoryError:
            # Numba defers frees: give back what is pending, as its own allocator does, then
            # try once more (a second MemoryError carries spool's message out).
            self.deallocations.clear()
            buf = _lib.Buffer(size, device)
        if not buf.ptr:  # 0 bytes
            return MemoryPointer(self.context, _device_pointer(0), size)
        self._size_batches(device)
        self.allocations[buf.ptr] = buf
        return MemoryPointer(self.context, _device_pointer(buf.ptr), size,
                             finalizer=_forget(self, buf.ptr, size))

    def _size_batches(self, device):
        """Numba flushes pending frees past CUDA_DEALLOCS_RATIO of the device's memory: its own
        manager sets that capacity in initialize(), this one once the device's pool is made (an
        unset capacity, 0, would flush at every free)."""
        pending = self.deallocations
        if not int(getattr(pending, "memory_capacity", 1)):
            pending.memory_capacity = _lib.stats(device)["device_total"]

    @contextlib.contextmanager
    def defer_cleanup(self):
        """Frees wait while this is active (Numba's own manager's rule); when the outermost
        one ends, what waited is freed at once rather than at the next batch."""
        with super().defer_cleanup():
            yield
        self.deallocations.clear()  # nothing while an outer defer_cleanup is still active

    def get_memory_info(self):
        """(free, total) bytes of the device, from spool's stats; NotImplementedError before the
        device's pool is made (no other CUDA call here)."""
        try:
            s = _lib.stats(self.context.device.id)
        except RuntimeError as e:
            raise NotImplementedError(f"spool.numba: {e}") from e
        return MemoryInfo(free=s["device_free"], total=s["device_total"])

    def get_ipc_handle(self, memory):
        # A cudaMemPool's buffers have no cuIpcGetMemHandle handle (so GetIpcHandleMixin
        # cannot serve): spool shares whole pools instead.
        raise NotImplementedError(
            "spool.numba: spool's buffers come from a cudaMemPool, which CUDA's legacy IPC "
            "cannot export; share a pool made with ipc=posix_fd through spool_pool_export "
            "(spool's README, 'Several GPUs and processes')")

    @property
    def interface_version(self):
        return 1


def install(conf=None, lib=None):
    """Makes spool Numba's memory manager (cuda.set_memory_manager(SpoolNumbaManager)), before
    Numba makes its CUDA context. Returns the library's path. conf and lib: as for
    spool.cupy.install."""
    cdll = _lib.load(lib)
    if conf is not None:
        _lib.configure(cdll, conf)
    cuda.set_memory_manager(SpoolNumbaManager)
    return _lib.loaded_path()


# NUMBA_CUDA_MEMORY_MANAGER=spool.numba: Numba imports the module and takes this name.
_numba_memory_manager = SpoolNumbaManager
