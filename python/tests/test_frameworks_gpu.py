"""spool.cupy, spool.numba and spool.torch on a GPU (ctest frameworks_gpu, label gpu): each
framework's arrays are buffers of spool's pool, compute right, come back when freed, and run out
of memory with spool's message; CuPy and PyTorch share one stream and one pool.

Each scenario runs in a process of its own (an allocator is chosen before a framework makes its
CUDA context). A framework that is not installed skips its scenarios; exit 77 (skipped) when
none could run: no GPU, or none of CuPy, Numba, PyTorch.
"""
import json
import os
import subprocess
import sys
import textwrap
import unittest

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

CUPY = """
import cupy
import spool, spool.cupy
spool.cupy.install()
out = {}
a = cupy.arange(1 << 20, dtype=cupy.float32)
out["sum"] = float((a * 2).sum())
out["in_use"] = spool.stats(0)["bytes_in_use"]
s = cupy.cuda.Stream(non_blocking=True)
with s:
    b = cupy.ones(1 << 18, dtype=cupy.float64)
    out["stream_sum"] = float(b.sum())
s.synchronize()
del a, b
cupy.cuda.Device(0).synchronize()
out["in_use_after"] = spool.stats(0)["bytes_in_use"]
try:
    cupy.empty(1 << 46, dtype=cupy.uint8)
    out["oom"] = None
except cupy.cuda.memory.OutOfMemoryError as e:
    out["oom"] = str(e)
allocs = spool.stats(0)["allocs"]
spool.cupy.uninstall()
c = cupy.ones(1000)
out["allocs_after_uninstall"] = spool.stats(0)["allocs"] - allocs
out["pool_after_uninstall"] = cupy.get_default_memory_pool().used_bytes() > 0
print(json.dumps(out))
"""

NUMBA = """
import os
os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "spool.numba"
import numpy as np
from numba import cuda
import spool

# Copies only, no kernel: a @cuda.jit kernel would test Numba's compiler against this NumPy
# (numba-cuda 0.68 fails to import it with NumPy 2.4 on the H200), not its memory manager.
out = {}
host = np.arange(1 << 16, dtype=np.float32)
d = cuda.to_device(host)
e = cuda.device_array_like(d)
e.copy_to_device(d)  # device to device, both spool buffers
out["ok"] = bool((e.copy_to_host() == host).all())
out["view_ok"] = bool((d[::2].copy_to_host() == host[::2]).all())
mgr = cuda.current_context().memory_manager
named = {"d": d.device_ctypes_pointer.value, "e": e.device_ctypes_pointer.value}
del e
out["manager"] = type(cuda.current_context().memory_manager).__name__
out["in_use"] = spool.stats(0)["bytes_in_use"]
free, total = cuda.current_context().get_memory_info()
out["info"] = [free, total]
try:
    d.get_ipc_handle()
    out["ipc"] = None
except NotImplementedError as e:
    out["ipc"] = str(e)
with cuda.defer_cleanup():
    del d
    out["in_use_deferred"] = spool.stats(0)["bytes_in_use"]
cuda.synchronize()
out["in_use_after"] = spool.stats(0)["bytes_in_use"]  # defer_cleanup's end freed d
out["held"] = [n for n, p in named.items() if p in mgr.allocations]
print(json.dumps(out))
"""

TORCH_CUPY = """
import torch
import spool, spool.torch
spool.torch.install()
import cupy
import spool.cupy
spool.cupy.install()
out = {}
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    with cupy.cuda.ExternalStream(s.cuda_stream):
        c = cupy.from_dlpack(t) * 3
        d = cupy.ones(1 << 20, dtype=cupy.float32)
        u = torch.from_dlpack(c + d)
    out["value"] = float(u.sum().item())
torch.cuda.synchronize()
st = spool.stats(0)
out["in_use"] = st["bytes_in_use"]
out["torch_bytes_in_use"] = st["torch_bytes_in_use"]
print(json.dumps(out))
"""

C_AND_TORCH = """
import ctypes
import torch
import spool, spool.torch
spool.torch.install()
lib = ctypes.CDLL(spool.library_path())  # C code linked to the package's library: the same copy
lib.spool_torch_pool.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
lib.spool_alloc.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                            ctypes.c_void_p]
lib.spool_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
out = {}
t = torch.ones(1 << 20, device="cuda")
before = torch.cuda.memory_allocated()
pool, buf = ctypes.c_void_p(), ctypes.c_void_p()
stream = torch.cuda.current_stream().cuda_stream
out["pool"] = lib.spool_torch_pool(0, ctypes.byref(pool))
out["alloc"] = lib.spool_alloc(pool, ctypes.byref(buf), 8 << 20, stream)
out["allocated_change"] = torch.cuda.memory_allocated() - before
out["buffers"] = spool.stats(0)["buffers_in_use"]
out["free"] = lib.spool_free(pool, buf, stream)
out["allocated_after"] = torch.cuda.memory_allocated() - before
print(json.dumps(out))
"""


def run(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", "import json\n" + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        raise AssertionError(f"scenario failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def have(module, probe):
    """Whether module imports and probe (code) finds a device, in a separate process."""
    code = f"import {module}\n{probe}"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    return p.returncode == 0


_numba = []


def numba_result():
    """The Numba scenario's figures, run once for the tests that judge them."""
    if not _numba:
        _numba.append(run(NUMBA))
    return _numba[0]


HAVE_CUPY = have("cupy", "assert cupy.cuda.runtime.getDeviceCount() > 0")
HAVE_NUMBA = have("numba.cuda", "from numba import cuda; assert cuda.is_available()")
HAVE_TORCH = have("torch", "assert torch.cuda.is_available()")
MiB = 1 << 20


class Frameworks(unittest.TestCase):
    @unittest.skipUnless(HAVE_CUPY, "CuPy or a GPU is missing")
    def test_cupy_arrays_are_spool_buffers_until_uninstall(self):
        r = run(CUPY)
        self.assertEqual(r["sum"], float((1 << 20) * ((1 << 20) - 1)))
        self.assertEqual(r["stream_sum"], float(1 << 18))
        self.assertGreaterEqual(r["in_use"], 4 * MiB)
        self.assertEqual(r["in_use_after"], 0)
        self.assertIsNotNone(r["oom"], "a 64 TiB array did not fail")
        self.assertIn("spool", r["oom"])
        self.assertEqual(r["allocs_after_uninstall"], 0)
        self.assertTrue(r["pool_after_uninstall"])

    @unittest.skipUnless(HAVE_NUMBA, "Numba or a GPU is missing")
    def test_numba_device_arrays_are_spool_buffers(self):
        r = numba_result()
        self.assertTrue(r["ok"])
        self.assertTrue(r["view_ok"])
        self.assertEqual(r["manager"], "SpoolNumbaManager")
        self.assertGreaterEqual(r["in_use"], 256 * 1024)
        self.assertGreater(r["info"][1], r["info"][0])
        self.assertIn("spool_pool_export", r["ipc"])
        self.assertGreaterEqual(r["in_use_deferred"], 256 * 1024)  # the free waits

    @unittest.skipUnless(HAVE_NUMBA, "Numba or a GPU is missing")
    def test_numba_arrays_come_back_when_defer_cleanup_ends(self):
        r = numba_result()
        self.assertEqual(r["in_use_after"], 0, r)

    @unittest.skipUnless(HAVE_TORCH, "PyTorch or a GPU is missing")
    def test_c_code_allocates_from_the_pool_pytorch_uses(self):
        r = run(C_AND_TORCH)
        self.assertEqual((r["pool"], r["alloc"], r["free"]), (0, 0, 0), r)
        # torch.cuda.memory_allocated() is the pool's: the C buffer is in it, then gone.
        self.assertEqual(r["allocated_change"], 8 * MiB, r)
        self.assertGreaterEqual(r["buffers"], 2, r)
        self.assertEqual(r["allocated_after"], 0, r)

    @unittest.skipUnless(HAVE_CUPY and HAVE_TORCH, "CuPy, PyTorch or a GPU is missing")
    def test_cupy_and_torch_share_one_stream_and_one_pool(self):
        r = run(TORCH_CUPY)
        n = 1 << 20
        self.assertEqual(r["value"], float(3 * n * (n - 1) // 2 + n))
        # Both frameworks' buffers are in the one pool: torch's tensor, CuPy's two arrays and the
        # tensor CuPy's sum became (shared, not copied, through DLPack).
        self.assertGreaterEqual(r["in_use"], 3 * 4 * MiB)
        self.assertEqual(r["torch_bytes_in_use"], r["in_use"])


if __name__ == "__main__":
    if not (HAVE_CUPY or HAVE_NUMBA or HAVE_TORCH):
        print("frameworks_gpu: skipped: no GPU, or none of CuPy, Numba, PyTorch")
        sys.exit(77)
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
