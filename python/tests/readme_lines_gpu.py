#!/usr/bin/env python3
"""The README's Python lines, run against an installed package (pip install .), on a GPU:
PyTorch under spool's allocator class (a cuDNN benchmark-mode CNN, torch.compile with
mode="reduce-overhead" against eager, memory_stats() beside spool's stats), then CuPy and Numba
on the same pool. Prints what each step gave, one `name: value` line per figure, and exits 1 if
a step failed. Not a ctest test: it needs the package installed where python3 finds it (not
python/ on sys.path), which the GPU runs do by hand:

    pip install . && python3 python/tests/readme_lines_gpu.py
"""
import os
import sys
import traceback

failed = []


def step(name):
    def wrap(fn):
        try:
            for key, value in fn():
                print(f"{name}: {key}: {value}", flush=True)
        except Exception:  # noqa: BLE001 (every failure is reported, then the next step runs)
            failed.append(name)
            print(f"{name}: FAILED\n{traceback.format_exc()}", flush=True)
    return wrap


import torch  # noqa: E402
import spool  # noqa: E402
import spool.torch  # noqa: E402

spool.torch.install(conf="max_size=100GiB")
print(f"package: {os.path.dirname(spool.__file__)} version {spool.__version__}")
print(f"library: {spool.library_path()}")


@step("torch")
def _():
    yield "native", spool.torch.native()
    yield "backend", torch.cuda.get_allocator_backend()


@step("cudnn.benchmark")
def _():
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(32, 10)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(64, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    losses = []
    for _ in range(20):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 4))
    torch.backends.cudnn.benchmark = False
    yield "losses (first, last)", (losses[0], losses[-1])
    yield "decreasing", losses[-1] < losses[0]


@step("torch.compile reduce-overhead")
def _():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 256)).cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    worst = 0.0
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(128, 256, device="cuda")
            worst = max(worst, (compiled(x).clone() - model(x)).abs().max().item())
    from torch._dynamo.utils import counters
    skips = sum(v for k, v in counters["inductor"].items() if "cudagraph_skips" in k)
    yield "calls", 6
    yield "cudagraph skips", skips
    yield "max |compiled - eager|", f"{worst:.3g}"
    assert skips == 0 and worst < 1e-3


@step("memory_stats")
def _():
    torch.cuda.synchronize()
    ms = torch.cuda.memory_stats()
    st = spool.stats(0)
    yield "memory_stats reserved_bytes.all.peak", ms["reserved_bytes.all.peak"]
    yield "spool bytes_reserved_peak", st["bytes_reserved_peak"]
    yield "max_memory_reserved()", torch.cuda.max_memory_reserved()
    yield "memory_allocated()", torch.cuda.memory_allocated()
    yield "spool bytes_in_use", st["bytes_in_use"]
    assert ms["reserved_bytes.all.peak"] == st["bytes_reserved_peak"]


@step("cupy")
def _():
    import cupy
    import spool.cupy
    spool.cupy.install()
    before = spool.stats(0)["allocs"]
    a = cupy.arange(1 << 20, dtype=cupy.float32)
    total = float((a * 2).sum())
    yield "sum", total
    yield "spool allocations by CuPy", spool.stats(0)["allocs"] - before
    yield "CuPy's own pool bytes", cupy.get_default_memory_pool().used_bytes()
    assert total == float(2 * sum(range(1 << 20)))


@step("numba")
def _():
    import numpy as np
    import spool.numba
    spool.numba.install()
    from numba import cuda
    before = spool.stats(0)["allocs"]
    host = np.arange(1 << 16, dtype=np.float32)
    d = cuda.to_device(host)
    ok = bool((d.copy_to_host() == host).all())
    yield "manager", type(cuda.current_context().memory_manager).__name__
    yield "round trip", ok
    yield "spool allocations by Numba", spool.stats(0)["allocs"] - before
    assert ok


print("failed: " + (", ".join(failed) if failed else "none"))
sys.exit(1 if failed else 0)
