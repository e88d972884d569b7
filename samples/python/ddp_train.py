"""DistributedDataParallel training with spool as the CUDA allocator in every rank.

    python3 samples/python/ddp_train.py [--ranks N] [--steps S] [--allocator spool|native]
                                       [--out FILE.json]

One process per GPU (torch.multiprocessing.spawn; torchrun works the same way, each rank then
calling train() itself), NCCL between them. Each rank installs spool before it touches CUDA, so
every tensor, DDP's gradient buckets and NCCL's all-reduce buffers included, is a spool buffer;
DDP hands buckets to NCCL's streams, and the stream rules make that safe (record_stream is
spool's hand-off). The same seeds give the same losses with either allocator: the script prints
each rank's losses and spool's stats, and with --out writes them as JSON for a comparison.

--ranks defaults to the number of visible GPUs (at most 2); one rank runs the same code on one
GPU. Needs PyTorch with CUDA and NCCL, and spool's Python package on the path.
"""
import argparse
import json
import os
import sys


def model_and_data(torch, rank):
    torch.manual_seed(1234)  # the same weights on every rank, as DDP expects
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    x = torch.randn(64, 256, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    return model, x, y


def train(rank, ranks, steps, allocator, port, results):
    if allocator == "spool":
        import spool.torch
        spool.torch.install()
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=ranks)
    model, x, y = model_and_data(torch, rank)
    model = torch.nn.parallel.DistributedDataParallel(model.cuda(rank), device_ids=[rank],
                                                      bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = x.cuda(rank), y.cuda(rank)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces the gradient buckets on NCCL's stream
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    dist.destroy_process_group()
    del model, opt, x, y, loss  # what is left in use now is what the rank did not give back
    torch.cuda.synchronize()
    out = {"rank": rank, "losses": losses}
    if allocator == "spool":
        import spool
        st = spool.stats(rank)
        out["stats"] = {k: st[k] for k in ("bytes_in_use", "bytes_in_use_peak",
                                           "bytes_reserved_peak", "allocs", "frees")
                        if k in st}
    results[rank] = out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--allocator", choices=("spool", "native"), default="spool")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"ddp_train: needs PyTorch ({e})")
        return 77
    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        print("ddp_train: needs a CUDA device and NCCL")
        return 77
    ranks = a.ranks or min(2, torch.cuda.device_count())
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(train, args=(ranks, a.steps, a.allocator, a.port, results), nprocs=ranks)
        res = [results[r] for r in range(ranks)]
    for r in res:
        print(f"rank {r['rank']} ({a.allocator}): losses {r['losses'][0]:.6f} .. "
              f"{r['losses'][-1]:.6f}" + (f", spool stats {r['stats']}" if "stats" in r else ""))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"allocator": a.allocator, "ranks": res}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
