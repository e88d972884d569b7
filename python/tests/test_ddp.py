"""DDP with spool in every rank against the native allocator: the same losses to 1e-6, and each
rank's spool stats once its tensors are gone. Runs samples/python/ddp_train.py twice (each allocator in
processes of its own: PyTorch's allocator is chosen once per process). Exit 77 (skipped) without
PyTorch, a GPU or NCCL."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "..", "samples", "python", "ddp_train.py")


def run(allocator, out, port):
    p = subprocess.run([sys.executable, SAMPLE, "--allocator", allocator, "--out", out,
                        "--port", str(port)], capture_output=True, text=True, timeout=600)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    return p.returncode


def main():
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "spool.json"), os.path.join(d, "native.json")
        rc = run("spool", a, 29541)
        if rc == 77:
            return 77
        if rc != 0 or run("native", b, 29542) != 0:
            print("test_ddp: a training run failed")
            return 1
        with open(a) as f:
            sp = json.load(f)["ranks"]
        with open(b) as f:
            na = json.load(f)["ranks"]
    bad = 0
    for s, n in zip(sp, na):
        worst = max(abs(x - y) for x, y in zip(s["losses"], n["losses"]))
        print(f"rank {s['rank']}: {len(s['losses'])} steps, largest loss difference {worst:.2e}")
        print(f"rank {s['rank']}: spool stats after the run {s.get('stats')}")
        if worst > 1e-6:
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
