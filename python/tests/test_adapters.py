#!/usr/bin/env python3
"""spool.cupy and spool.numba without CuPy, Numba or a GPU (ctest python_adapters, label cpu).

They run against stand-ins for the parts of CuPy and Numba they use (written to a temporary
folder first on sys.path, with numba-cuda's import redirector, where it is installed, taken out
of the way: a real CuPy or Numba here is not used), on any machine, a GPU's too (a failed
allocation asks for a device that no machine has): what they hand the
framework, that a failed allocation comes back as a Python exception with spool's message (the
plug-in's status-returning entry: a C++ exception through ctypes would end this process), and
that importing them without the framework names it. A GPU with the real frameworks is not
covered here. Needs SPOOL_TORCH_LIB (ctest sets it to the built library).
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)

FAKE_CUPY = """
import types
class _Stream:
    ptr = 0
class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id
class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset
class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes")
allocators = []
cuda = types.SimpleNamespace(
    get_current_stream=lambda: _Stream(), set_allocator=allocators.append,
    get_allocator=lambda: allocators[-1] if allocators else "cupy's pool",
    UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
    runtime=types.SimpleNamespace(getDevice=lambda: 0),
    memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
"""

FAKE_NUMBA_CUDA = """
import collections
import contextlib
MemoryInfo = collections.namedtuple("MemoryInfo", "free total")
managers = []
set_memory_manager = managers.append
class _Pending:
    cleared = 0
    def __init__(self):
        self.items, self.disabled, self.memory_capacity = [], 0, 0
    def add_item(self, dtor, handle, size=1):
        self.items.append((dtor, handle, size))
    @contextlib.contextmanager
    def disable(self):
        self.disabled += 1
        try:
            yield
        finally:
            self.disabled -= 1
    def clear(self):
        if self.disabled:
            return
        self.cleared += 1
        for dtor, handle, _ in self.items:
            dtor(handle)
        self.items = []
class HostOnlyCUDAMemoryManager:
    def __init__(self, context):
        self.context, self.allocations, self.deallocations = context, {}, _Pending()
    @contextlib.contextmanager
    def defer_cleanup(self):
        with self.deallocations.disable():
            yield
class MemoryPointer:
    def __init__(self, context, pointer, size, owner=None, finalizer=None):
        self.context, self.pointer, self.size, self.finalizer = context, pointer, size, finalizer
"""


NO_DEVICE = 63  # the plug-in's last ordinal, which no machine has: spool cannot make its pool


def write(root, path, text):
    path = os.path.join(root, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class Adapters(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lib = os.environ.get("SPOOL_TORCH_LIB", "")
        if not os.path.isfile(lib):  # never a silent pass
            raise SystemExit(f"SPOOL_TORCH_LIB={lib!r} does not name the built library")
        cls.tmp = tempfile.TemporaryDirectory()
        write(cls.tmp.name, "cupy/__init__.py", FAKE_CUPY)
        write(cls.tmp.name, "numba/__init__.py", "")
        write(cls.tmp.name, "numba/cuda/__init__.py", FAKE_NUMBA_CUDA)
        write(cls.tmp.name, "numba/cuda/cudadrv/__init__.py", "")
        write(cls.tmp.name, "numba/cuda/cudadrv/driver.py", "USE_NV_BINDING = False\n")
        sys.path[:0] = [cls.tmp.name, PYTHON_DIR]
        # numba-cuda's .pth installs a finder that sends `numba.cuda` to its own package ahead
        # of sys.path: the stand-in would not be the one imported.
        cls.finders = sys.meta_path[:]
        sys.meta_path[:] = [f for f in sys.meta_path
                            if not type(f).__module__.startswith("_numba_cuda")]

    @classmethod
    def tearDownClass(cls):
        sys.meta_path[:] = cls.finders
        cls.tmp.cleanup()

    def test_cupy_allocator(self):
        import cupy
        import spool.cupy
        p = spool.cupy.allocator(0)  # an empty array: nothing allocated, nothing to free
        self.assertEqual((p.ptr, p.mem.size, p.mem.owner, p.mem.device_id), (0, 0, None, 0))
        # No such device: the pool cannot be made, and that is an exception, not an abort.
        current = cupy.cuda.runtime.getDevice
        cupy.cuda.runtime.getDevice = lambda: NO_DEVICE
        try:
            with self.assertRaisesRegex(RuntimeError, "spool"):
                spool.cupy.allocator(1 << 20)
        finally:
            cupy.cuda.runtime.getDevice = current
        self.assertEqual(spool.cupy.install(), spool.library_path())
        self.assertEqual(cupy.allocators, [spool.cupy.allocator])

    def test_cupy_uninstall_restores_the_allocator_from_before(self):
        import cupy
        import spool.cupy
        del cupy.allocators[:]
        spool.cupy.install()
        spool.cupy.install()  # twice: what came before is still CuPy's own
        spool.cupy.uninstall()
        self.assertEqual(cupy.allocators[-1], "cupy's pool")
        spool.cupy.uninstall()  # no install left: nothing changes
        self.assertEqual(len(cupy.allocators), 3)

    def test_cupy_out_of_memory_is_cupys(self):
        import cupy
        import spool.cupy
        e = spool.cupy._out_of_memory(1 << 30, "spool_alloc: out of device memory: asked 1 GiB")
        self.assertIsInstance(e, cupy.cuda.memory.OutOfMemoryError)
        self.assertEqual(str(e), "spool_alloc: out of device memory: asked 1 GiB")

    def test_numba_manager(self):
        from numba import cuda
        import spool.numba
        context = types.SimpleNamespace(device=types.SimpleNamespace(id=NO_DEVICE))
        m = spool.numba.SpoolNumbaManager(context=context)
        m.initialize()
        self.assertEqual(m.interface_version, 1)
        p = m.memalloc(0)
        self.assertEqual((p.size, p.pointer.value, p.finalizer), (0, 0, None))
        with self.assertRaisesRegex(RuntimeError, "spool"):
            m.memalloc(1 << 20)
        self.assertEqual(m.allocations, {})
        with self.assertRaisesRegex(NotImplementedError, "spool_pool_export"):
            m.get_ipc_handle(p)
        with self.assertRaisesRegex(NotImplementedError, f"no pool on device {NO_DEVICE} yet"):
            m.get_memory_info()
        self.assertEqual(spool.numba.install(), spool.library_path())
        self.assertEqual(cuda.managers, [spool.numba.SpoolNumbaManager])
        self.assertIs(spool.numba._numba_memory_manager, spool.numba.SpoolNumbaManager)

    def test_numba_pointer_follows_the_binding_numba_has(self):
        import spool.numba
        from numba.cuda.cudadrv import driver
        self.assertIsInstance(spool.numba._device_pointer(5), ctypes.c_uint64)
        saved = driver.USE_NV_BINDING
        del driver.USE_NV_BINDING  # numba-cuda: NVIDIA's binding only, and no switch
        driver.binding = types.SimpleNamespace(CUdeviceptr=lambda p: ("CUdeviceptr", p))
        try:
            self.assertEqual(spool.numba._device_pointer(5), ("CUdeviceptr", 5))
        finally:
            driver.USE_NV_BINDING = saved
            del driver.binding

    def test_numba_frees_wait_in_numbas_pending_deallocations(self):
        import spool.numba
        context = types.SimpleNamespace(device=types.SimpleNamespace(id=0))
        m = spool.numba.SpoolNumbaManager(context=context)
        m.allocations[0x1000] = "a buffer"
        finalizer = spool.numba._forget(m, 0x1000, 4096)
        finalizer()  # the array is gone: the free is pending, under defer_cleanup too
        self.assertEqual(m.allocations, {0x1000: "a buffer"})
        self.assertEqual(m.deallocations.items[0][1:], (0x1000, 4096))
        m.deallocations.clear()  # Numba's batch: now the owner goes, and the buffer with it
        self.assertEqual(m.allocations, {})

    def test_numba_frees_deferred_by_defer_cleanup_go_when_the_outermost_one_ends(self):
        import spool.numba
        context = types.SimpleNamespace(device=types.SimpleNamespace(id=0))
        m = spool.numba.SpoolNumbaManager(context=context)
        m.allocations[0x1000] = "a buffer"
        with m.defer_cleanup():
            with m.defer_cleanup():
                spool.numba._forget(m, 0x1000, 4096)()
            self.assertEqual(m.allocations, {0x1000: "a buffer"})  # an outer one still holds
        self.assertEqual(m.allocations, {})

    def test_import_without_the_framework_names_it(self):
        for name, words in (("cupy", "spool.cupy needs CuPy"),
                            ("numba", "spool.numba needs Numba")):
            code = (f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
                    f"sys.modules[{name!r}] = None\n"
                    f"try:\n    import spool.{name}\nexcept ImportError as e:\n    print(e)\n")
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(words, p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
