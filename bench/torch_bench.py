#!/usr/bin/env python3
"""PyTorch's allocators against spool, in one run: PyTorch's native caching allocator, its
cudaMallocAsync backend and spool (spool.torch, python/spool/torch.py), each training the CNN and the
transformer of bench/torch_models.py in its own process (PyTorch's allocator is chosen once per
process). Prints a markdown table for docs/benchmarks.md: median and p90 step time, and peak
reserved and peak in-use memory as each allocator counts them, with the card, driver, PyTorch,
spool and commit.

    python bench/torch_bench.py --lib BUILD/plugin/libspool_torch.so [--quick] [--out FILE]

Needs torch and a CUDA device. The runs go one after another on device 0: one model at a time,
its allocators back to back, so that a drift of clocks or temperature shows between models
rather than between allocators.
"""
import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODELS = os.path.join(HERE, "torch_models.py")
LABELS = {"native": "PyTorch native", "async": "PyTorch cudaMallocAsync", "spool": "spool"}
MiB = 1 << 20


def one_run(args, model, allocator):
    """The RESULT of one child (torch_models.py), or raises with its output."""
    cmd = [sys.executable, MODELS, "--model", model, "--allocator", allocator,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--preset", args.preset]
    if allocator == "spool" and args.spool_conf:
        cmd += ["--spool-conf", args.spool_conf]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH")])))
    if args.lib:
        env["SPOOL_TORCH_LIB"] = os.path.abspath(args.lib)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # the child sets it for `async` only
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({p.returncode}):\n"
                           f"{(p.stdout + p.stderr)[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              "-i", "0"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip()
    except OSError:
        return "unknown"


def commit(given):
    if given:
        return given
    try:
        out = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown (pass --commit)"


def spool_version(lib):
    sys.path.insert(0, os.path.join(REPO, "python"))
    import spool.torch as spool_torch
    try:
        return spool_torch._load(lib).spool_torch_version().decode()
    except (OSError, RuntimeError):
        return "unknown"


def mib(v):
    return "n/a" if v is None else f"{v / MiB:,.0f}"


def table(results):
    rows = ["| model | allocator | step ms (median) | step ms (p90) | vs native | peak reserved "
            "MiB | peak in use MiB |", "|---|---|---:|---:|---:|---:|---:|"]
    for model in sorted({r["model"] for r in results}, key=["cnn", "transformer"].index):
        runs = [r for r in results if r["model"] == model]
        base = next((r["step_ms_median"] for r in runs if r["allocator"] == "native"), None)
        for r in runs:
            rel = f"{r['step_ms_median'] / base:.3f}x" if base else "n/a"
            rows.append(f"| {model} | {LABELS[r['allocator']]} | {r['step_ms_median']:.2f} | "
                        f"{r['step_ms_p90']:.2f} | {rel} | {mib(r['peak_reserved'])} | "
                        f"{mib(r['peak_in_use'])} |")
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: the small test models, 30 steps (10 warm-up)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (default 220)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="first steps left out of the times (default 20)")
    ap.add_argument("--models", default="cnn,transformer")
    ap.add_argument("--allocators", default="native,async,spool")
    ap.add_argument("--preset", choices=("test", "bench"), default=None)
    ap.add_argument("--spool-conf", default=None, help="config text for spool's pools")
    ap.add_argument("--lib", default=None, help="libspool_torch.so (else SPOOL_TORCH_LIB or the "
                    "build tree)")
    ap.add_argument("--commit", default=None, help="spool's commit, where git cannot tell")
    ap.add_argument("--out", default=None, help="also write the report (markdown) here")
    ap.add_argument("--json", default=None, help="also write every run's RESULT here")
    args = ap.parse_args(argv)
    args.steps = args.steps or (30 if args.quick else 220)
    args.warmup = args.warmup if args.warmup is not None else (10 if args.quick else 20)
    args.preset = args.preset or ("test" if args.quick else "bench")

    results = []
    for model in args.models.split(","):
        for allocator in args.allocators.split(","):
            print(f"torch_bench: {model} with {allocator} ...", file=sys.stderr, flush=True)
            results.append(one_run(args, model, allocator))
    first = results[0]
    head = [
        "PyTorch allocators, one run (bench/torch_bench.py)",
        "",
        f"- card: {first['card']}; driver: {driver_version()}",
        f"- PyTorch {first['torch']} (CUDA {first['cuda']}); spool {spool_version(args.lib)}, "
        f"commit {commit(args.commit)}",
        f"- {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; preset {args.preset}, "
        f"{args.steps} steps, the first {args.warmup} left out of the times; spool config: "
        f"{args.spool_conf or 'defaults'}",
        f"- command: {shlex.join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])}",
        "",
        table(results),
        "",
    ]
    report = "\n".join(head)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
