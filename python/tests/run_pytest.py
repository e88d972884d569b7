#!/usr/bin/env python3
"""ctest torch_pytest and torch_native_pytest (label gpu): pytest on test_spool_torch.py (or the
file after --file, e.g. test_torch_native.py), never a false pass.

Exits 77, which CTest reports as skipped, with the reason, where pytest, torch or a CUDA device
is missing. Otherwise runs pytest in a child process (so this one never initializes CUDA) and
fails when any test failed, errored or was skipped: once torch and a device are here, a skipped
test would hide that nothing was checked. Other arguments go to pytest (e.g. -k oom).
"""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def skip(reason):
    print(f"skipped: {reason}", flush=True)
    sys.exit(SKIP)


def preconditions():
    try:
        import pytest  # noqa: F401
    except ImportError:
        skip("pytest is not installed for " + sys.executable)
    try:
        import torch
    except ImportError:
        skip("PyTorch is not installed for " + sys.executable)
    if not torch.cuda.is_available():
        skip(f"PyTorch {torch.__version__} sees no CUDA device")
    return torch


def counts(junit):
    """(tests, failures + errors, skipped) from pytest's JUnit XML."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return total, bad, skipped


def test_file(argv):
    """(the test file, pytest's arguments) from argv: `--file NAME` picks the file."""
    if len(argv) >= 2 and argv[0] == "--file":
        return argv[1], argv[2:]
    return "test_spool_torch.py", argv


def main():
    name, args = test_file(sys.argv[1:])
    torch = preconditions()
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), {sys.executable}, "
          f"library {os.environ.get('SPOOL_TORCH_LIB', '(found by spool_torch)')}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider",
               f"--junitxml={junit}", os.path.join(HERE, name), *args]
        rc = subprocess.call(cmd)
        if rc != 0:
            return rc
        total, bad, skipped = counts(junit)
    if total == 0 or bad or skipped:
        print(f"run_pytest: {total} tests, {bad} failed, {skipped} skipped: with torch and a "
              "device here every test must run and pass", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
