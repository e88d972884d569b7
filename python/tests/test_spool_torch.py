"""spool as PyTorch's CUDA allocator, on a GPU with PyTorch.

Every scenario runs in its own process (torch_scenarios.py, or bench/torch_models.py for
training), since PyTorch's allocator can be chosen only once per process; this file judges what
they print. Skipped, with the reason, where torch or a CUDA device is missing. The library is
SPOOL_TORCH_LIB, else what spool_torch.library_path() finds (the build tree); a missing library
is an error, not a skip.

    python -m pytest -v python/tests/test_spool_torch.py     # or: ctest -R torch_pytest
"""
import json
import math
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
SCENARIOS = os.path.join(HERE, "torch_scenarios.py")
MODELS = os.path.join(REPO, "bench", "torch_models.py")

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():  # does not initialize CUDA in this process
    pytest.skip("PyTorch sees no CUDA device", allow_module_level=True)

sys.path.insert(0, PYTHON_DIR)
import spool_torch  # noqa: E402


@pytest.fixture(scope="module")
def env():
    """The children's environment: the library, the helper, deterministic cuBLAS, no allocator
    settings of the caller's."""
    e = dict(os.environ)
    e["SPOOL_TORCH_LIB"] = spool_torch.library_path()  # FileNotFoundError: an error, not a skip
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [PYTHON_DIR, e.get("PYTHONPATH")]))
    e["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    for k in ("PYTORCH_CUDA_ALLOC_CONF", "SPOOL_CONF"):
        e.pop(k, None)
    return e


def run(env, *argv, timeout=900):
    """Runs a scenario script; returns its RESULT."""
    p = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                       timeout=timeout)
    output = p.stdout + p.stderr
    assert p.returncode == 0, f"{argv} exited {p.returncode}:\n{output[-6000:]}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"{argv} printed no RESULT:\n{output[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def scenario(env, name, *args):
    return run(env, SCENARIOS, name, *args)


# ---- streams ------------------------------------------------------------------------------------

def test_record_stream_keeps_data_across_streams(env):
    r = scenario(env, "streams")
    # The race is real: without record_stream the reader sees the next owner's NaN ...
    assert r["control"]["nan"] and not r["control"]["close"], r["control"]
    # ... and with it, never.
    assert r["protected"] == {"close": True, "nan": False}, r["protected"]
    assert r["chain"] == [True, True, True]
    st = r["stats"]
    assert st["allocs"] > 0 and st["frees"] > 0 and st["free_failures"] == 0


# ---- training, bit for bit ----------------------------------------------------------------------

def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_training_matches_native_bit_for_bit(env, model):
    args = [MODELS, "--model", model, "--steps", "300", "--deterministic", "--preset", "test"]
    native = run(env, *args, "--allocator", "native")
    spool = run(env, *args, "--allocator", "spool")
    assert len(native["losses"]) == len(spool["losses"]) == 300
    losses = [float.fromhex(h) for h in spool["losses"]]
    assert all(math.isfinite(v) for v in losses)
    assert losses[0] != losses[-1]  # it trained
    first = first_difference(native["losses"], spool["losses"])
    if first is not None:  # is it the allocator, or is the run not repeatable at all?
        again = first_difference(native["losses"], run(env, *args, "--allocator",
                                                       "native")["losses"])
        pytest.fail(f"step {first}: native {native['losses'][first]}, spool "
                    f"{spool['losses'][first]}; a second native run "
                    + ("matches the first" if again is None else f"differs from step {again}"))
    st = spool["spool_stats"]
    assert st["allocs"] > 1000 and st["cache_hits"] > 0 and st["free_failures"] == 0
    assert st["bytes_in_use_peak"] > 0


# ---- empty_cache --------------------------------------------------------------------------------

def test_empty_cache_gives_reserved_memory_back(env):
    r = scenario(env, "empty_cache")
    before, after = r["before"], r["after"]
    assert before["bytes_reserved"] >= 1536 * (1 << 20), before  # 8 x 64 MiB + 1 GiB, freed
    assert after["bytes_reserved"] < before["bytes_reserved"]
    assert after["bytes_reserved"] < 256 * (1 << 20), after  # what `keep` needs, rounded
    # what stays idle is the rest of the heap chunk that `keep` sits in
    assert after["bytes_front"] == 0 and after["trims"] >= 1
    assert after["bytes_cached"] <= after["bytes_heap"], after
    assert r["keep_sum"] == float(1 << 20)


# ---- out of memory ------------------------------------------------------------------------------

def test_oom_is_torch_out_of_memory_error_with_spools_message(env):
    r = scenario(env, "oom")
    for where in ("forward", "backward"):
        e = r[where]
        assert e is not None, f"{where}: nothing raised"
        assert e["oom"], f"{where}: {e['type']} is not torch.OutOfMemoryError: {e['msg']}"
        assert "spool_alloc: out of device memory: asked 2.00 GiB" in e["msg"], e["msg"]
        assert "limit 1.00 GiB" in e["msg"], e["msg"]
    assert r["after"] == 128 * (1 << 20) and r["x_sum"] == 256 * (1 << 20)
    e = r["fraction"]
    assert e is not None and e["oom"], e
    assert "torch.cuda.set_per_process_memory_fraction" in e["msg"], e["msg"]
    assert "asked 256.00 MiB on device 0" in e["msg"], e["msg"]
    st = r["stats"]
    assert st["ooms"] >= 2 and st["torch_limit"] is not None
    assert st["torch_limit"] <= 512 * (1 << 20)


# ---- install ------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["tensor", "init"])
def test_install_after_cuda_init_is_a_clear_error(env, how):
    e = scenario(env, "late_install", "--how", how)["raised"]
    assert e is not None and e["type"] == "RuntimeError", e
    assert "must run before PyTorch initializes CUDA" in e["msg"], e["msg"]
    assert "right after `import torch`" in e["msg"], e["msg"]


def test_install_rules_and_empty_tensors(env):
    r = scenario(env, "install_rules")
    assert r["bad_conf"]["type"] == "ValueError", r["bad_conf"]
    assert "unknown key 'bogus'" in r["bad_conf"]["msg"]
    assert r["same_again"] is True
    assert r["other_conf"]["type"] == "RuntimeError"
    assert "already installed" in r["other_conf"]["msg"]
    assert r["values"] == [45.0, 0, 0.0]
    assert r["stats"]["allocs"] >= 1
