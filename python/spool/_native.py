"""Building and loading spool's allocator class for PyTorch (_torch_native.cpp), on first use.

The class derives from PyTorch's CUDAPluggableAllocator, so it is compiled against the PyTorch
installed here, with torch.utils.cpp_extension.load (which needs ninja), or, where ninja is
missing, with one compiler command of the same flags; neither initializes CUDA. It links to the
libspool_torch.so that the package loaded (by its path, found again at run time through its
RUNPATH), so PyTorch, CuPy and Numba keep one pool per device. The build lands in a cache
folder keyed by everything that goes into it:

    SPOOL_CACHE_DIR, else $XDG_CACHE_HOME/spool, else ~/.cache/spool; then
    torch-<torch version>-py<X.Y>-<hash of the sources, the library's path and the compiler>/

Any reason the class cannot be had (no C++ headers in the PyTorch install, no compiler, a
failed build, a library that is not the loaded one) is raised as Unavailable, with the reason
in one line and the build's output, when there is one, in build.log of that folder.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys

from . import _lib

NAME = "spool_torch_native"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_native.cpp")
HEADER = "spool_torch.h"
PLUGGABLE_HEADER = os.path.join("torch", "csrc", "cuda", "CUDAPluggableAllocator.h")


class Unavailable(Exception):
    """Why the allocator class cannot be used in this process."""


def cache_dir():
    root = os.environ.get("SPOOL_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "spool")
    return root


def header_dir():
    """The folder of spool_torch.h: inside the package (a wheel, CMake's install), or the
    source tree's plugin/ folder next to python/."""
    here = os.path.dirname(SOURCE)
    for d in (here, os.path.join(os.path.dirname(os.path.dirname(here)), "plugin")):
        if os.path.isfile(os.path.join(d, HEADER)):
            return d
    raise Unavailable(f"{HEADER} is not in the spool package ({here}) nor in a source tree's "
                      "plugin/ folder")


def _compiler():
    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None:
        raise Unavailable(f"no C++ compiler: {cxx!r} (CXX, or c++) is not on PATH")
    return cxx


def _cuda_home(cpp_extension):
    home = getattr(cpp_extension, "CUDA_HOME", None)
    if not home or not os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")):
        raise Unavailable(f"no CUDA toolkit headers (cuda_runtime_api.h) under CUDA_HOME={home!r}")
    return home


def _build_folder(torch, lib, cxx):
    key = hashlib.sha256()
    for path in (SOURCE, os.path.join(header_dir(), HEADER)):
        with open(path, "rb") as f:
            key.update(f.read())
    key.update(os.path.realpath(lib).encode())
    key.update(cxx.encode())
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return os.path.join(cache_dir(), f"torch-{torch.__version__}-py{py}-{key.hexdigest()[:16]}")


def _flags(cpp_extension, lib):
    """(include folders, compile flags, link flags) beyond what load() adds to a C++ extension.

    The CUDA headers and runtime and PyTorch's CUDA libraries are named here: load(with_cuda=
    True) would ask every device's compute capability for nvcc's flags, which initializes CUDA,
    and PyTorch's allocator cannot be swapped after that."""
    lib = os.path.realpath(lib)
    cuda = _cuda_home(cpp_extension)
    includes = [header_dir(), os.path.join(cuda, "include")]
    cflags = ["-O2", "-std=c++17", "-fvisibility=hidden"]
    ldflags = [f"-L{os.path.join(cuda, 'lib64')}", "-lcudart", "-lc10_cuda", "-ltorch_cuda",
               lib, "-Wl,-rpath," + os.path.dirname(lib)]
    return includes, cflags, ldflags


def _with_ninja(torch, cpp_extension, folder, lib):
    includes, cflags, ldflags = _flags(cpp_extension, lib)
    return cpp_extension.load(
        name=NAME, sources=[SOURCE], extra_include_paths=includes, extra_cflags=cflags,
        extra_ldflags=ldflags, build_directory=folder, with_cuda=False, is_python_module=False,
        verbose=False)


def _without_ninja(torch, cpp_extension, folder, lib, cxx):
    """What load() runs, as one compiler command; the library replaced only once it is whole."""
    out = os.path.join(folder, NAME + ".so")
    if not os.path.isfile(out):
        includes, cflags, ldflags = _flags(cpp_extension, lib)
        abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
        torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        tmp = f"{out}.{os.getpid()}.tmp"
        cmd = [cxx, "-shared", "-fPIC", *cflags, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
               *(f"-I{d}" for d in [*includes, *cpp_extension.include_paths()]), SOURCE,
               "-o", tmp, f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", *ldflags]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}\n{p.stdout}{p.stderr}")
        os.replace(tmp, out)
    ctypes.CDLL(out)
    return out


def _last_line(text):
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1] if lines else type(text).__name__


def _declare(cdll):
    cdll.spool_torch_native_install.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    cdll.spool_torch_native_install.restype = ctypes.c_int
    cdll.spool_torch_native_active.argtypes = []
    cdll.spool_torch_native_active.restype = ctypes.c_int
    cdll.spool_torch_native_alloc_address.argtypes = []
    cdll.spool_torch_native_alloc_address.restype = ctypes.c_void_p


def load(torch, lib, plugin):
    """The built class as a ctypes.CDLL, linked to lib (whose loaded copy is plugin). Raises
    Unavailable saying why not."""
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        raise Unavailable(f"torch.utils.cpp_extension cannot be imported: {e}") from e
    includes = cpp_extension.include_paths()
    if not any(os.path.isfile(os.path.join(d, PLUGGABLE_HEADER)) for d in includes):
        raise Unavailable(f"PyTorch {torch.__version__} has no C++ headers here (no "
                          f"{PLUGGABLE_HEADER} under {', '.join(includes)})")
    if not os.path.isfile(SOURCE):
        raise Unavailable(f"the class's source {SOURCE} is missing from the package")
    cxx = _compiler()
    folder = _build_folder(torch, lib, cxx)
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, "build.log")
    try:
        if cpp_extension.is_ninja_available():
            path = _with_ninja(torch, cpp_extension, folder, lib)
        else:
            path = _without_ninja(torch, cpp_extension, folder, lib, cxx)
    except Exception as e:  # noqa: BLE001 (whatever the build raised is the reason)
        with open(log, "w") as f:
            f.write(f"{e}\n")
        raise Unavailable(f"building {os.path.basename(SOURCE)} against PyTorch "
                          f"{torch.__version__} failed ({_last_line(e)}; the output is in "
                          f"{log})") from e
    path = path or os.path.join(folder, NAME + ".so")
    cdll = ctypes.CDLL(path)  # already loaded by the build's loader: the same handle
    _declare(cdll)
    mine = cdll.spool_torch_native_alloc_address()
    theirs = ctypes.cast(plugin.spool_torch_alloc, ctypes.c_void_p).value
    if mine != theirs:
        raise Unavailable(f"{path} is linked to another copy of {_lib.LIBRARY} than the "
                          f"package loaded ({lib}): it would not share its pools")
    return cdll


def install(cdll):
    """Makes the class PyTorch's CUDA allocator; RuntimeError with PyTorch's reason if not."""
    buf = ctypes.create_string_buffer(2048)
    if cdll.spool_torch_native_install(buf, len(buf)) != 0:
        raise RuntimeError(buf.value.decode(errors="replace"))


def active(cdll):
    return bool(cdll.spool_torch_native_active())

