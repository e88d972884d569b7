#!/usr/bin/env python3
"""`pip install .` of the spool package, without a GPU (ctest python_package, label cpu).

Installs the source tree with pip into a temporary folder (--target: no venv to make, nothing
of this machine's Python touched), then, in a fresh interpreter that sees only that folder and
no SPOOL_TORCH_LIB: `import spool`, spool.__version__ is the project's version (argument 2,
CMake's PROJECT_VERSION) and the library's, the library is found inside the package, so are
the allocator class's source and header (spool.torch imports without PyTorch), so are the C
headers for code that shares the pools (include_dir()), the install holds
only the package and its metadata, stats() says there is no pool yet, and
spool.cupy / spool.numba raise ImportError naming CuPy / Numba when those are absent.

scikit-build-core already importable here: it is used as it is (--no-build-isolation: fast, no
network). Otherwise pip fetches it into its isolated build environment; when that cannot be
done (no network, no cached wheel) the test exits 77 (skipped), saying why. No pip: 77 too.

usage: test_package.py SOURCE_DIR VERSION
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
# What pip prints when it cannot fetch the build backend (no network, no cache).
FETCH_FAILED = ("No matching distribution found", "Could not find a version that satisfies",
                "Failed to establish a new connection", "Temporary failure in name resolution",
                "ProxyError", "Network is unreachable", "Read timed out")

CHECK = r"""
import json, os, sys
import spool
out = {"version": spool.__version__, "file": spool.__file__, "lib": spool.library_path()}
import spool.torch, spool._native  # without PyTorch too: torch is imported by install()
out["native_source"] = spool._native.SOURCE if os.path.isfile(spool._native.SOURCE) else None
out["native_header_dir"] = spool._native.header_dir()
out["native_before_install"] = spool.torch.native()
inc = spool.include_dir()
out["include"] = [inc] + sorted(os.path.relpath(os.path.join(d, f), inc)
                                for d, _, fs in os.walk(inc) for f in fs)
try:
    spool.stats(0)
except RuntimeError as e:
    out["stats"] = str(e)
for name in ("cupy", "numba"):
    sys.modules[name] = None  # absent even where the real one is installed
    try:
        __import__("spool." + name)
    except ImportError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def main():
    source, version = sys.argv[1], sys.argv[2]
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if pip.returncode != 0:
        print(f"skipped: {sys.executable} has no pip")
        return SKIP
    isolated = importlib.util.find_spec("scikit_build_core") is None
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "site")
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input",
               "--disable-pip-version-check", "--target", target, source]
        if not isolated:  # nothing to fetch; and no wheel of each run left in pip's cache
            cmd[4:4] = ["--no-build-isolation", "--no-cache-dir"]
        print("+", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            text = p.stdout + p.stderr
            if isolated and any(s in text for s in FETCH_FAILED):
                print(text[-3000:])
                print("skipped: scikit-build-core is not installed for this Python and pip "
                      "could not fetch it (no network or cached wheel)")
                return SKIP
            print(text[-8000:])
            print("FAILED: pip install . failed")
            return 1
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPOOL_TORCH_LIB", "PYTHONPATH", "PYTHONHOME")}
        env["PYTHONPATH"] = target
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        c = subprocess.run([sys.executable, "-s", "-c", CHECK], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=60)
        if c.returncode != 0:
            print(c.stdout + c.stderr)
            print("FAILED: the installed package did not import and answer")
            return 1
        got = json.loads(c.stdout.strip().splitlines()[-1])
        package = os.path.join(target, "spool")
        problems = []
        if got["version"] != version:
            problems.append(f"spool.__version__ is {got['version']!r}, the project's {version!r}")
        if os.path.dirname(got["file"]) != package:
            problems.append(f"spool was imported from {got['file']}, not from {package}")
        if got["lib"] != os.path.join(package, "libspool_torch.so"):
            problems.append(f"the library found is {got['lib']}, not the package's own")
        if got["native_source"] != os.path.join(package, "_torch_native.cpp"):
            problems.append(f"the allocator class's source is not in the package: "
                            f"{got['native_source']!r}")
        if got["native_header_dir"] != package:
            problems.append(f"spool_torch.h is found in {got['native_header_dir']}, not in the "
                            "package")
        want = [os.path.join(package, "include"), "spool/export.h", "spool/spool.h",
                "spool/spool.hpp", "spool/version.h", "spool_torch.h"]
        if got["include"] != want:
            problems.append(f"the C headers for code sharing the pools: {got['include']}, "
                            f"expected {want}")
        if got["native_before_install"] is not False:
            problems.append(f"spool.torch.native() before install: {got['native_before_install']}")
        if "no pool on device 0 yet" not in got.get("stats", ""):
            problems.append(f"stats(0) without a pool: {got.get('stats')!r}")
        for name, words in (("cupy", "spool.cupy needs CuPy"),
                            ("numba", "spool.numba needs Numba")):
            if words not in got.get(name, ""):
                problems.append(f"import spool.{name} without {name}: {got.get(name)!r}")
        extra = sorted(set(os.listdir(target)) - {"spool", f"spool-{version}.dist-info"})
        if extra:
            problems.append(f"the install holds more than the package: {extra}")
        print(json.dumps(got, indent=1))
        for line in problems:
            print("FAILED:", line)
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
