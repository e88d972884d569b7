#!/usr/bin/env python3
"""The scenarios of test_spool_torch.py, one per process (PyTorch's allocator is chosen once per
process): `python torch_scenarios.py NAME [--conf TEXT] [--how tensor|init]` prints one line
`RESULT {json}` last, which the test checks. Needs torch, a CUDA device and spool_torch (on
PYTHONPATH) with its library (SPOOL_TORCH_LIB or the build tree).

    streams        tensors shared across streams with record_stream, against a race
    empty_cache    torch.cuda.empty_cache() gives spool's reserved memory back
    oom            out of memory (max_size, in forward and in backward, and the memory
                   fraction) raises torch.OutOfMemoryError with spool's message
    late_install   install() after CUDA was initialized (--how tensor|init): the clear error
    install_rules  a bad conf is a ValueError and installs nothing; a second install
"""
import argparse
import json
import sys

MiB = 1 << 20
GiB = 1 << 30
SLEEP_CYCLES = 200_000_000  # torch.cuda._sleep: about 0.1 s on an H200 (1.98 GHz)


def start(conf=None):
    import torch
    import spool_torch
    spool_torch.install(conf=conf)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device available to PyTorch")
    return torch, spool_torch


def oom_type(torch):
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def race(torch, base, ref, side, record):
    """A copy of base is read by a long kernel on side while the main stream frees it and fills
    new tensors of its size with NaN. With record_stream, the reader must see base's values."""
    main = torch.cuda.current_stream()
    x = base.clone()  # allocated on the main stream; the only reference
    side.wait_stream(main)
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)  # the main stream's fills below run first
        y = x @ x
    if record:
        x.record_stream(side)
    del x  # freed on the main stream, while side has yet to read it
    fills = [torch.full_like(base, float("nan")) for _ in range(4)]
    main.wait_stream(side)
    torch.cuda.synchronize()
    del fills
    return {"close": bool(torch.allclose(y, ref, rtol=1e-3, atol=1e-2)),
            "nan": bool(torch.isnan(y).any())}


def chain(torch, n_streams=3, numel=MiB):
    """Tensors made on several streams, each read on the next one after record_stream, then freed
    on their own stream while the readers still wait, and their memory refilled."""
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    made = []
    for i, s in enumerate(streams):
        with torch.cuda.stream(s):
            made.append(torch.full((numel,), float(i + 1), device="cuda"))
    outs = []
    for i, s in enumerate(streams):
        reader = streams[(i + 1) % n_streams]
        reader.wait_stream(s)
        with torch.cuda.stream(reader):
            torch.cuda._sleep(SLEEP_CYCLES // 4)
            outs.append(made[i] * 2)
        made[i].record_stream(reader)
    made.clear()
    for s in streams:
        with torch.cuda.stream(s):
            for _ in range(2):
                torch.full((numel,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    return [bool(torch.all(o == 2.0 * (i + 1))) for i, o in enumerate(outs)]


def scenario_streams(args):
    torch, spool_torch = start(args.conf)
    n = 2048  # 16 MiB: served by spool's heap
    base = torch.randn(n, n, device="cuda")
    ref = base @ base
    side = torch.cuda.Stream()
    return {"protected": race(torch, base, ref, side, record=True),
            "control": race(torch, base, ref, side, record=False),
            "chain": chain(torch), "stats": spool_torch.stats()}


def scenario_empty_cache(args):
    torch, spool_torch = start(args.conf)
    keep = torch.ones(MiB, device="cuda")  # 4 MiB that stay
    big = [torch.empty(64 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    big.append(torch.empty(GiB, dtype=torch.uint8, device="cuda"))
    del big
    torch.cuda.synchronize()
    before = spool_torch.stats()
    torch.cuda.empty_cache()
    after = spool_torch.stats()
    return {"before": before, "after": after, "keep_sum": float(keep.sum().item())}


def caught(torch, fn):
    """What fn raised: its type's name, whether it is torch's OutOfMemoryError, its message."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the test judges the type)
        return {"type": type(e).__name__, "oom": isinstance(e, oom_type(torch)), "msg": str(e)}
    return None


def ones(t):
    """t's element count if every element is 1, else -1. min and max reduce in the tensor's
    own dtype: sum() of uint8 would first make an int64 copy, 8 times the tensor, which this
    scenario's max_size does not hold."""
    return t.numel() if int(t.min().item()) == 1 == int(t.max().item()) else -1


def scenario_oom(args):
    torch, spool_torch = start(args.conf or "max_size=1GiB")
    x = torch.ones(256 * MiB, dtype=torch.uint8, device="cuda")
    out = {"forward": caught(torch, lambda: torch.empty(2 * GiB, dtype=torch.uint8,
                                                         device="cuda"))}

    class Big(torch.autograd.Function):  # allocates too much in backward (autograd's thread)
        @staticmethod
        def forward(ctx, w):
            return w * 2

        @staticmethod
        def backward(ctx, g):
            torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
            return g * 2

    w = torch.ones(100, device="cuda", requires_grad=True)
    out["backward"] = caught(torch, lambda: Big.apply(w).sum().backward())
    y = torch.ones(128 * MiB, dtype=torch.uint8, device="cuda")  # still usable
    out["after"] = ones(y)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(512 * MiB / total, 0)
    out["fraction"] = caught(torch, lambda: torch.empty(256 * MiB, dtype=torch.uint8,
                                                         device="cuda"))
    out["x_sum"] = ones(x)
    out["stats"] = spool_torch.stats()
    return out


def scenario_late_install(args):
    import torch
    import spool_torch
    if args.how == "tensor":
        torch.zeros(1, device="cuda")
    else:
        torch.cuda.init()
    return {"raised": caught(torch, spool_torch.install)}


def scenario_install_rules(args):
    import torch
    import spool_torch
    out = {"bad_conf": caught(torch, lambda: spool_torch.install(conf="bogus=1"))}
    path = spool_torch.install(conf="front_limit=512MiB")
    out["same_again"] = spool_torch.install(conf="front_limit=512MiB") == path
    out["other_conf"] = caught(torch, lambda: spool_torch.install(conf="cache=off"))
    t = torch.arange(10, device="cuda", dtype=torch.float32)
    empty = torch.empty(0, device="cuda")
    out["values"] = [t.sum().item(), empty.numel(), float((empty + 1).sum().item())]
    out["stats"] = spool_torch.stats("cuda:0")
    return out


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=sorted(SCENARIOS))
    ap.add_argument("--conf", default=None)
    ap.add_argument("--how", choices=("tensor", "init"), default="tensor")
    args = ap.parse_args(argv)
    result = SCENARIOS[args.name](args)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
