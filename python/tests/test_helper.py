#!/usr/bin/env python3
"""spool.torch, through its old name python/spool_torch.py (an alias kept for one release),
without PyTorch or a GPU (ctest torch_helper, label cpu): it imports
without torch, finds the library (SPOOL_TORCH_LIB, lib=, next to the module), loads it, sees only
the plug-in's exports, passes config errors on as ValueError with spool's message, and says why
stats() has nothing yet. install() runs against a stand-in `torch` module (FAKE_TORCH below) that
records what PyTorch would be given: the plug-in's functions and hooks, the clear error when
CUDA is initialized already, one install per process. The real PyTorch on a GPU is
test_spool_torch.py. Needs SPOOL_TORCH_LIB (ctest sets it to the built library)."""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, PYTHON_DIR)

import spool_torch  # noqa: E402  (after the path)

LIB = os.environ.get("SPOOL_TORCH_LIB", "")

# A stand-in for the part of torch that install() uses, with what PyTorch 2.11 does: the
# allocator can be swapped only while CUDA is not initialized.
FAKE_TORCH = """
import ctypes
class _Hooks:
    def __init__(self):
        self.fns = {}
    def __getattr__(self, name):
        if not name.startswith("set_"):
            raise AttributeError(name)
        return lambda addr: self.fns.__setitem__(name[4:], addr)
class _Pluggable:
    def __init__(self, path, alloc, free):
        lib = ctypes.CDLL(path)
        self.names = (alloc, free)
        self.addrs = {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in (alloc, free)}
        self._hooks = _Hooks()
    def allocator(self):
        return self._hooks
class _Memory:
    CUDAPluggableAllocator = _Pluggable
    current = None
    swap_fails = False
    def change_current_allocator(self, a):
        if self.swap_fails or cuda.initialized:
            raise RuntimeError("Can't swap an already initialized allocator")
        self.current = a
class _Cuda:
    initialized = False
    available = True
    memory = _Memory()
    def is_initialized(self):
        return self.initialized
    def is_available(self):
        return self.available
cuda = _Cuda()
"""


def run_python(code, env):
    """Runs code in a fresh interpreter; returns (exit code, stdout + stderr)."""
    # spool_torch's DeprecationWarning (the old name) would be in the output: test_alias has it.
    p = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], env=env,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class Helper(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(LIB):  # never a silent pass
            raise SystemExit(f"SPOOL_TORCH_LIB={LIB!r} does not name the built library")

    def test_import_does_not_import_torch(self):
        code = f"import sys; sys.path.insert(0, {PYTHON_DIR!r}); import spool_torch; " \
               "print('torch' in sys.modules)"
        rc, out = run_python(code, dict(os.environ))
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.strip(), "False")

    def test_library_path_from_env_and_argument(self):
        self.assertEqual(spool_torch.library_path(), os.path.abspath(LIB))
        self.assertEqual(spool_torch.library_path(lib=LIB), os.path.abspath(LIB))
        with self.assertRaisesRegex(FileNotFoundError, "is not a file"):
            spool_torch.library_path(lib="/nonexistent/libspool_torch.so")

    def test_library_path_errors_name_what_was_tried(self):
        env = dict(os.environ, SPOOL_TORCH_LIB="/nonexistent/libspool_torch.so")
        code = f"import sys; sys.path.insert(0, {PYTHON_DIR!r}); import spool_torch; " \
               "spool_torch.library_path()"
        rc, out = run_python(code, env)
        self.assertNotEqual(rc, 0)
        self.assertIn("FileNotFoundError", out)
        self.assertIn("/nonexistent/libspool_torch.so (SPOOL_TORCH_LIB)", out)

    def test_library_next_to_the_module(self):
        # CMake's install layout (spool_torch.py and spool/ side by side, the library next to
        # them), then a wheel's (the library inside the package), which comes first.
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(os.path.join(PYTHON_DIR, "spool_torch.py"), d)
            shutil.copytree(os.path.join(PYTHON_DIR, "spool"), os.path.join(d, "spool"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            os.symlink(os.path.abspath(LIB), os.path.join(d, spool_torch.LIBRARY))
            env = {k: v for k, v in os.environ.items() if k != "SPOOL_TORCH_LIB"}
            code = f"import sys; sys.path.insert(0, {d!r}); import spool_torch; " \
                   "print(spool_torch.library_path())"
            rc, out = run_python(code, env)
            self.assertEqual(rc, 0, out)
            self.assertEqual(out.strip(), os.path.join(d, spool_torch.LIBRARY))
            inside = os.path.join(d, "spool", spool_torch.LIBRARY)
            os.symlink(os.path.abspath(LIB), inside)
            rc, out = run_python(code, env)
            self.assertEqual(rc, 0, out)
            self.assertEqual(out.strip(), inside)

    def test_alias_is_spool_torch(self):
        code = f"import sys, warnings; sys.path.insert(0, {PYTHON_DIR!r})\n" \
               "with warnings.catch_warnings(record=True) as w:\n" \
               "    warnings.simplefilter('always')\n" \
               "    import spool_torch\n" \
               "import spool, spool.torch\n" \
               "print(spool_torch is spool.torch, spool_torch.install is spool.torch.install)\n" \
               "print([str(x.message) for x in w if x.category is DeprecationWarning])\n"
        rc, out = run_python(code, dict(os.environ))
        self.assertEqual(rc, 0, out)
        lines = out.splitlines()
        self.assertEqual(lines[0], "True True")
        self.assertIn("spool_torch is now spool.torch", lines[1])

    def test_exports_the_plugin_and_spools_c_api_not_its_internals(self):
        cdll = ctypes.CDLL(LIB)
        for name in ("spool_torch_alloc", "spool_torch_free", "spool_torch_record_stream",
                     "spool_torch_empty_cache", "spool_torch_init",
                     "spool_torch_set_memory_fraction", "spool_torch_configure",
                     "spool_torch_stats_json", "spool_torch_last_error", "spool_torch_version",
                     "spool_torch_try_alloc", "spool_torch_counters_get",
                     "spool_torch_reset_peaks", "spool_torch_cache_info", "spool_torch_pool",
                     # C code in the process calls these on spool_torch_pool's pool
                     "spool_alloc", "spool_free", "spool_stats_get", "spool_report",
                     "spool_last_error", "spool_scope_begin", "spool_alloc_batch"):
            self.assertTrue(hasattr(cdll, name), name)
        for name in ("spool__torch_throw", "spool__torch_forget", "spool__format_size",
                     "spool__nvtx_probe"):
            self.assertFalse(hasattr(cdll, name), name)

    def test_config_errors_are_value_errors(self):
        cdll = spool_torch._load()
        self.assertRegex(cdll.spool_torch_version().decode(), r"^\d+\.\d+\.\d+$")
        with self.assertRaisesRegex(ValueError, "unknown key 'bogus'"):
            spool_torch._configure(cdll, "bogus=1")
        with self.assertRaisesRegex(ValueError, "release_threshold"):
            spool_torch._configure(cdll, "release_threshold=4Gx")
        spool_torch._configure(cdll, "release_threshold=4GiB, cache=off")
        spool_torch._configure(cdll, None)

    def test_stats_before_any_pool(self):
        with self.assertRaisesRegex(RuntimeError, "no pool on device 0 yet"):
            spool_torch.stats()
        with self.assertRaisesRegex(RuntimeError, "device 99 is out of range"):
            spool_torch.stats("cuda:99")
        with self.assertRaises(ValueError):
            spool_torch.stats("cpu")

    def run_with_fake_torch(self, code, native="0"):
        """code after `import torch, spool_torch` with the stand-in torch; its printed lines.
        native: SPOOL_TORCH_NATIVE for the child (the stand-in has no cpp_extension: "0" takes
        the pluggable path without the warning; None leaves the choice to install())."""
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            head = f"import sys; sys.path[:0] = [{d!r}, {PYTHON_DIR!r}]\n" \
                   "import ctypes, torch, spool_torch\n"
            env = {k: v for k, v in os.environ.items() if k != "SPOOL_TORCH_NATIVE"}
            if native is not None:
                env["SPOOL_TORCH_NATIVE"] = native
            rc, out = run_python(head + code, env)
            self.assertEqual(rc, 0, out)
            return out.splitlines()

    def test_install_hands_the_plugin_to_torch(self):
        out = self.run_with_fake_torch(
            "path = spool_torch.install(conf='front_limit=2GiB')\n"
            "a = torch.cuda.memory.current\n"
            "lib = ctypes.CDLL(path)\n"
            "addr = lambda n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value\n"
            "print(a.names)\n"
            "want = {'init': 'spool_torch_init', 'reset': 'spool_torch_empty_cache',\n"
            "        'memory_fraction': 'spool_torch_set_memory_fraction',\n"
            "        'record_stream': 'spool_torch_record_stream'}\n"
            "print(sorted(k + '_fn' for k in want) == sorted(a.allocator().fns))\n"
            "print(all(a.allocator().fns[k + '_fn'] == addr(n) for k, n in want.items()))\n"
            "print(spool_torch.install(conf='front_limit=2GiB') == path)\n"
            "try:\n"
            "    spool_torch.install(conf='cache=off')\n"
            "except RuntimeError as e:\n"
            "    print('second:', e)\n")
        self.assertEqual(out[0], "('spool_torch_alloc', 'spool_torch_free')")
        self.assertEqual(out[1:4], ["True", "True", "True"])
        self.assertIn("already installed with conf='front_limit=2GiB'", out[4])

    def test_install_after_cuda_init_says_what_to_do(self):
        out = self.run_with_fake_torch(
            "torch.cuda.initialized = True\n"
            "try:\n"
            "    spool_torch.install()\n"
            "except RuntimeError as e:\n"
            "    print(e)\n"
            "torch.cuda.initialized = False\n"
            "torch.cuda.memory.swap_fails = True  # initialized between the check and the swap\n"
            "try:\n"
            "    spool_torch.install()\n"
            "except RuntimeError as e:\n"
            "    print(e, '|', repr(e.__cause__))\n"
            "torch.cuda.memory.swap_fails = False\n"
            "print(spool_torch.install() is not None)\n")
        self.assertIn("must run before PyTorch initializes CUDA", out[0])
        self.assertIn("right after `import torch`", out[0])
        self.assertIn("must run before PyTorch initializes CUDA", out[1])
        self.assertIn("Can't swap an already initialized allocator", out[1])
        self.assertEqual(out[2], "True")

    def test_install_bad_conf_installs_nothing(self):
        out = self.run_with_fake_torch(
            "try:\n"
            "    spool_torch.install(conf='bogus=1')\n"
            "except ValueError as e:\n"
            "    print('ValueError:', e)\n"
            "print(torch.cuda.memory.current is None)\n"
            "spool_torch.install(conf='cache=off')\n"
            "print(torch.cuda.memory.current is not None)\n")
        self.assertIn("ValueError: config line 1: unknown key 'bogus'", out[0])
        self.assertEqual(out[1:], ["True", "True"])

    def test_install_without_the_class_warns_once_and_takes_the_pluggable_path(self):
        out = self.run_with_fake_torch(
            "import warnings\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    path = spool_torch.install()\n"
            "    spool_torch.install()\n"
            "print(len(w), w[0].category.__name__ if w else None)\n"
            "print(w[0].message if w else '')\n"
            "print(torch.cuda.memory.current.names, spool_torch.native())\n", native=None)
        self.assertEqual(out[0], "1 RuntimeWarning")
        self.assertIn("torch.utils.cpp_extension cannot be imported", out[1])
        self.assertIn("install(native=False) or SPOOL_TORCH_NATIVE=0", out[1])
        self.assertEqual(out[2], "('spool_torch_alloc', 'spool_torch_free') False")

    def test_install_native_true_without_the_class_is_an_error(self):
        out = self.run_with_fake_torch(
            "for how in ('argument', 'env'):\n"
            "    try:\n"
            "        spool_torch.install(native=True) if how == 'argument' else "
            "spool_torch.install()\n"
            "    except RuntimeError as e:\n"
            "        print(how, e)\n"
            "print(torch.cuda.memory.current is None)\n", native="1")
        for line, how in zip(out, ("argument", "env")):
            self.assertTrue(line.startswith(how + " spool.torch.install(native=True): "), line)
            self.assertIn("cpp_extension cannot be imported", line)
        self.assertEqual(out[2], "True")

    def test_class_source_and_header_ship_with_the_package(self):
        from spool import _native
        self.assertTrue(os.path.isfile(_native.SOURCE), _native.SOURCE)
        self.assertTrue(os.path.isfile(os.path.join(_native.header_dir(), _native.HEADER)))
        with open(_native.SOURCE) as f:
            text = f.read()
        for name in ("spool_torch_native_install", "spool_torch_native_active",
                     "spool_torch_native_alloc_address", "checkPoolLiveAllocations",
                     "cacheInfo", "getDeviceStats"):
            self.assertIn(name, text)

    def test_native_env_values(self):
        out = self.run_with_fake_torch(
            "try:\n"
            "    spool_torch.install()\n"
            "except ValueError as e:\n"
            "    print(e)\n", native="maybe")
        self.assertEqual(out, ["SPOOL_TORCH_NATIVE='maybe': use 1, 0 or auto"])

    def test_install_without_torch(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
        else:
            self.skipTest("torch is installed here (the GPU tests cover install)")
        with self.assertRaisesRegex(ImportError, r"spool.torch.install\(\) needs PyTorch"):
            spool_torch.install()


if __name__ == "__main__":
    unittest.main(verbosity=2)
