#!/usr/bin/env python3
"""The scenarios of test_torch_native.py, one per process (PyTorch's allocator is chosen once per
process): `python torch_native_scenarios.py NAME` prints one line `RESULT {json}` last, which
the test checks. Needs torch, a CUDA device and the spool package (python/ on PYTHONPATH) with
its library (SPOOL_TORCH_LIB or the build tree). The allocator class is required (native=True)
except in `fallback` and `pluggable`.

    memory_stats   memory_stats() keys, memory_allocated, the peaks and their resets, against
                   spool's own counters
    graph_pool     two torch.cuda.graph captures sharing one pool, replayed; the pool's live
                   allocations; a tensor freed during a capture; whether the driver knows a
                   tensor allocated under capture (as Triton's launchers ask it)
    compile        torch.compile(mode="reduce-overhead") against eager
    compile_train  training steps of a torch.compile(mode="reduce-overhead") model on two batch
                   shapes in turn (graph trees record, replay and restore checkpoints), against
                   the same steps in eager mode
    fallback       the class cannot be built (CXX names no compiler): one warning, then the
                   pluggable path
    pluggable      install(native=False): no warning, the pluggable path
"""
import ctypes
import json
import math
import sys
import warnings

from torch_scenarios import MiB, caught

GRAPH_N = 1 << 20


def start(native=True):
    import torch
    import spool.torch
    spool.torch.install(native=native)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device available to PyTorch")
    return torch, spool.torch


def scenario_memory_stats():
    torch, st = start()
    out = {"native": st.native(), "backend": torch.cuda.get_allocator_backend()}
    x = torch.empty(0, device="cuda")  # makes the pool: spool counts from here
    before = torch.cuda.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
    out["allocated_delta"] = torch.cuda.memory_allocated() - before
    big = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    spool_stats = st.stats()
    out["keys"] = sorted(stats)
    out["reserved_peak"] = stats["reserved_bytes.all.peak"]
    out["spool_reserved_peak"] = spool_stats["bytes_reserved_peak"]
    out["max_allocated_before_reset"] = torch.cuda.max_memory_allocated()
    out["max_reserved"] = torch.cuda.max_memory_reserved()
    out["reserved"] = torch.cuda.memory_reserved()
    out["spool_reserved"] = spool_stats["bytes_reserved"]
    out["allocated"] = torch.cuda.memory_allocated()
    out["spool_in_use"] = spool_stats["bytes_in_use"]
    torch.cuda.reset_peak_memory_stats()
    out["max_allocated_after_reset"] = torch.cuda.max_memory_allocated()
    out["allocated_after_reset"] = torch.cuda.memory_allocated()
    out["spool_in_use_peak_after_reset"] = st.stats()["bytes_in_use_peak"]
    torch.cuda.reset_accumulated_memory_stats()
    y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    del y
    stats = torch.cuda.memory_stats()
    out["accumulated"] = {k: stats[k] for k in (
        "allocation.all.allocated", "allocation.all.freed", "allocated_bytes.all.allocated",
        "allocated_bytes.all.freed", "num_ooms", "num_alloc_retries")}
    out["summary_ok"] = "Allocated memory" in torch.cuda.memory_summary()
    out["x_numel"] = x.numel()
    return out


def scenario_graph_pool():
    torch, st = start()
    out = {"native": st.native()}
    check = torch._C._cuda_checkPoolLiveAllocations
    x = torch.randn(GRAPH_N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as PyTorch's docs do
        for _ in range(2):
            (x * 2 + 1).sin() + x
    torch.cuda.current_stream().wait_stream(side)
    doomed = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")  # freed during capture 1
    torch.cuda.synchronize()
    before = st.stats()["torch_bytes_in_use"]
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        y = x * 2 + 1
        out["captured_ptr_known"] = driver_knows(y.data_ptr())
        # Not this capture's memory, and on the legacy stream: its free must wait for the
        # capture's end (no CUDA call meanwhile, or the capture would break).
        del doomed
    # what the capture left: y in, doomed out (x * 2 was freed inside the graph)
    out["in_use_change"] = st.stats()["torch_bytes_in_use"] - before
    out["y_bytes"] = y.numel() * y.element_size()
    with torch.cuda.graph(g2, pool=g1.pool()):
        z = y.sin() + x
    pool = g1.pool()
    out["same_pool"] = list(g2.pool()) == list(pool)
    out["live_is_outputs"] = check(0, pool, {y.data_ptr(), z.data_ptr()})
    out["live_without_z"] = check(0, pool, {y.data_ptr()})
    out["live_with_x"] = check(0, pool, {y.data_ptr(), z.data_ptr(), x.data_ptr()})
    results = []
    for i in range(3):
        x.copy_(torch.randn(GRAPH_N, device="cuda", generator=None) * (i + 1))
        g1.replay()
        g2.replay()
        torch.cuda.synchronize()
        want_y = x * 2 + 1
        want_z = want_y.sin() + x
        results.append(bool(torch.equal(y, want_y)) and bool(torch.allclose(z, want_z)))
    out["replays"] = results
    del z
    out["live_after_del_z"] = check(0, pool, {y.data_ptr()})
    del g2, g1
    torch.cuda.synchronize()
    out["stats"] = st.stats()
    return out


def driver_knows(ptr):
    """Whether cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_POINTER) accepts ptr, as the
    launchers of Triton's kernels (Inductor's among them) require of every pointer argument."""
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_uint64(0)
    rc = cuda.cuPointerGetAttribute(ctypes.byref(dev), ctypes.c_int(3), ctypes.c_uint64(ptr))
    return rc == 0 and dev.value == ptr


def cudagraph_skips():
    from torch._dynamo.utils import counters
    return sum(counters["inductor"].get(k, 0) for k in counters["inductor"]
               if "cudagraph_skips" in k)


def scenario_compile():
    torch, st = start()
    out = {"native": st.native()}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 16)).cuda().eval()
    inputs = [torch.randn(32, 64, device="cuda") for _ in range(4)]
    with torch.no_grad():
        eager = [model(i) for i in inputs]
        compiled = torch.compile(model, mode="reduce-overhead")
        got = []

        def run_all():
            for i in inputs:
                got.append(compiled(i).clone())

        out["raised"] = caught(torch, run_all)
    if out["raised"] is None:
        out["match"] = [bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))
                        for a, b in zip(eager, got)]
    import torch._inductor.config as inductor
    out["trees"] = inductor.triton.cudagraph_trees  # Inductor's default: graph trees
    out["cudagraph_skips"] = cudagraph_skips()
    return out


def scenario_compile_train():
    torch, st = start()
    out = {"native": st.native()}

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                    torch.nn.Linear(128, 16)).cuda()
        return model, torch.optim.SGD(model.parameters(), lr=0.05)

    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randn(n, 64, device="cuda", generator=gen) for n in (32, 48) * 5]

    def steps(model, opt, losses):
        for x in batches:
            opt.zero_grad(set_to_none=True)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())

    eager, compiled = [], []
    steps(*make(), eager)
    model, opt = make()
    out["raised"] = caught(torch, lambda: steps(torch.compile(model, mode="reduce-overhead"),
                                                opt, compiled))
    out["losses"] = {"eager": eager, "compiled": compiled}
    out["match"] = len(eager) == len(compiled) and all(
        math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(eager, compiled))
    out["cudagraph_skips"] = cudagraph_skips()
    torch.cuda.synchronize()
    out["stats"] = st.stats()
    return out


def pluggable_result(torch, st, w):
    x = torch.arange(10, device="cuda", dtype=torch.float32)
    return {"warnings": [f"{x.category.__name__}: {x.message}" for x in w
                         if "spool" in str(x.message)],
            "native": st.native(), "sum": float(x.sum().item()),
            "backend": torch.cuda.get_allocator_backend(),
            "memory_stats": caught(torch, torch.cuda.memory_stats)}


def scenario_fallback():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch, st = start(native=None)
    return pluggable_result(torch, st, w)


def scenario_pluggable():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch, st = start(native=False)
    return pluggable_result(torch, st, w)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in SCENARIOS:
        raise SystemExit(f"usage: torch_native_scenarios.py {{{','.join(sorted(SCENARIOS))}}}")
    print("RESULT " + json.dumps(SCENARIOS[argv[0]]()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
