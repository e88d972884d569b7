#!/usr/bin/env python3
"""The two PyTorch workloads of spool's plug-in tests and benchmark: a small CNN and a small
transformer encoder, trained on random data.

One training run per process, under one allocator, since PyTorch's allocator can be chosen only
once per process:

    python bench/torch_models.py --model cnn --allocator spool --steps 300 --deterministic

prints one line `RESULT {json}` last: the losses (as float.hex, to compare bit for bit), the
step times, peak memory as the allocator counts it, the card and the versions.

Allocators: `native` (PyTorch's caching allocator), `async` (its cudaMallocAsync backend, chosen
with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, which this script sets before importing
torch), `spool` (spool.torch, python/spool/torch.py: spool's allocator class where it builds;
the library from --lib, SPOOL_TORCH_LIB or the build tree) and `spool-pluggable` (the same
library through CUDAPluggableAllocator alone). `--deterministic` makes runs repeatable (seed,
deterministic algorithms, cuDNN without benchmarking, the math attention kernel);
CUBLAS_WORKSPACE_CONFIG=:4096:8 is set for it when unset. `--cudnn-benchmark` then lets cuDNN
time its deterministic algorithms (torch.backends.cudnn.benchmark, which asks the allocator's
cacheInfo). Needs torch and a CUDA device; nothing else.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = {
    # test: fast, for the bit-exact comparison of tests; bench: closer to a real step
    "test": {"cnn": dict(batch=64, size=32, width=32), "transformer": dict(
        batch=16, seq=128, vocab=1000, d=256, heads=8, layers=4, ff=1024)},
    "bench": {"cnn": dict(batch=256, size=64, width=64), "transformer": dict(
        batch=32, seq=256, vocab=8192, d=512, heads=8, layers=6, ff=2048)},
}
ALLOCATORS = ("native", "async", "spool", "spool-pluggable")


def prepare_env(allocator, deterministic):
    """What must be in the environment before torch is imported."""
    if allocator == "async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    elif os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").find("cudaMallocAsync") >= 0:
        raise SystemExit("PYTORCH_CUDA_ALLOC_CONF asks for cudaMallocAsync: unset it for "
                         f"--allocator {allocator}")
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def build(torch, name, preset, device):
    """(model, make_batch, loss_fn) of workload name, on device."""
    nn = torch.nn
    p = PRESETS[preset][name]
    if name == "cnn":
        w = p["width"]

        def block(cin, cout, stride):
            return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU(inplace=True)]

        # Strided convolutions and a mean instead of pooling layers: adaptive pooling has no
        # deterministic backward on CUDA.
        features = nn.Sequential(*block(3, w, 1), *block(w, 2 * w, 2), *block(2 * w, 4 * w, 2),
                                 *block(4 * w, 4 * w, 1))
        head = nn.Linear(4 * w, 10)

        class CNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.features, self.head = features, head

            def forward(self, x):
                return self.head(self.features(x).mean(dim=(2, 3)))

        model = CNN()

        def make_batch():
            x = torch.randn(p["batch"], 3, p["size"], p["size"], device=device)
            return x, torch.randint(0, 10, (p["batch"],), device=device)

        return model.to(device), make_batch, nn.functional.cross_entropy

    if name == "transformer":
        class Transformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(p["vocab"], p["d"])
                self.pos = nn.Parameter(torch.zeros(1, p["seq"], p["d"]))
                layer = nn.TransformerEncoderLayer(p["d"], p["heads"], p["ff"], dropout=0.1,
                                                   batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, p["layers"],
                                                     enable_nested_tensor=False)
                self.head = nn.Linear(p["d"], p["vocab"])

            def forward(self, tokens):
                return self.head(self.encoder(self.embed(tokens) + self.pos))

        def make_batch():
            t = torch.randint(0, p["vocab"], (p["batch"], p["seq"] + 1), device=device)
            return t[:, :-1], t[:, 1:]

        def loss_fn(logits, target):
            return nn.functional.cross_entropy(logits.reshape(-1, p["vocab"]),
                                               target.reshape(-1))

        return Transformer().to(device), make_batch, loss_fn
    raise ValueError(f"unknown model {name!r}")


def attention_context(torch, deterministic):
    """The math attention kernel when deterministic: the fused ones may reduce in any order."""
    if not deterministic:
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.MATH])
    except ImportError:  # before PyTorch 2.3
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True,
                                              enable_mem_efficient=False)


def train(torch, model, make_batch, loss_fn, steps, deterministic):
    """Trains for steps; returns the losses (a CPU tensor) and each step's wall time in ms."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, times = [], []
    with attention_context(torch, deterministic):
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            x, y = make_batch()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    return torch.stack(losses).cpu(), times


def memory(torch, allocator, spool_torch):
    """Peak reserved and peak in-use bytes over the run, as the allocator counts them."""
    if allocator.startswith("spool"):
        st = spool_torch.stats(0)
        return {"peak_reserved": st["bytes_reserved_peak"], "peak_in_use":
                st["bytes_in_use_peak"], "spool_stats": st, "spool_native": spool_torch.native()}
    out = {}
    for key, fn in (("peak_reserved", torch.cuda.max_memory_reserved),
                    ("peak_in_use", torch.cuda.max_memory_allocated)):
        try:
            out[key] = int(fn(0))
        except RuntimeError as e:  # a backend that does not keep this figure
            out[key], out[key + "_error"] = None, str(e)
    return out


def run(args):
    prepare_env(args.allocator, args.deterministic)
    import torch
    spool_torch = None
    if args.allocator.startswith("spool"):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
        import spool.torch as spool_torch
        spool_torch.install(conf=args.spool_conf, lib=args.lib,
                            native=False if args.allocator == "spool-pluggable" else None)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device available to PyTorch")
    torch.manual_seed(args.seed)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    model, make_batch, loss_fn = build(torch, args.model, args.preset, torch.device("cuda", 0))
    losses, times = train(torch, model, make_batch, loss_fn, args.steps, args.deterministic)
    timed = times[args.warmup:] or times
    result = {
        "model": args.model, "allocator": args.allocator, "preset": args.preset,
        "steps": args.steps, "warmup": args.warmup, "deterministic": args.deterministic,
        "cudnn_benchmark": args.cudnn_benchmark,
        "losses": [float(v).hex() for v in losses.tolist()],
        "step_ms_median": statistics.median(timed),
        "step_ms_p90": sorted(timed)[min(len(timed) - 1, int(0.9 * len(timed)))],
        "step_ms_mean": statistics.fmean(timed),
        "card": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    result.update(memory(torch, args.allocator, spool_torch))
    print("RESULT " + json.dumps(result), flush=True)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("cnn", "transformer"), required=True)
    ap.add_argument("--allocator", choices=ALLOCATORS, required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=0, help="steps left out of the step times")
    ap.add_argument("--preset", choices=tuple(PRESETS), default="test")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True (after --deterministic)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spool-conf", default=None, help="config text for spool (on SPOOL_CONF)")
    ap.add_argument("--lib", default=None, help="path of libspool_torch.so")
    return ap.parse_args(argv)


if __name__ == "__main__":
    run(parse())
