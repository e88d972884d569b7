#!/usr/bin/env python3
"""PyTorch memory snapshots (torch.cuda.memory._snapshot(), pickled) to and from RMM's logging
CSV, which spool's trace tools read. Python's standard library only: PyTorch is not needed.

  spool_snapshot.py to-csv SNAPSHOT [--device N]   the device trace as CSV on stdout
  spool_snapshot.py from-csv OUT                   CSV on stdin to a snapshot pickle for
                                                   PyTorch's memory_viz

A snapshot holds plain dicts, lists, strings and numbers; anything else in the pickle (a class
to import) is refused rather than run. Exit status: 0 done, 1 bad usage, 2 bad input.
"""
import csv
import io
import pickle
import sys

HEADER = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]


class PlainUnpickler(pickle.Unpickler):
    """Unpickles data only: a pickle that names a class or function is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"holds a Python object ({module}.{name}); a memory snapshot holds plain data only")


def fail(msg):
    print(f"spool_snapshot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path, "rb") as f:
            snap = PlainUnpickler(f).load()
    except OSError as e:
        fail(f"{path}: cannot open: {e.strerror}")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        fail(f"{path}: not a readable pickle: {e}")
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        fail(f"{path}: not a PyTorch memory snapshot (no 'device_traces' list; record with "
             "torch.cuda.memory._record_memory_history() before taking it)")
    return snap


def rows(path, trace):
    """RMM rows of one device's trace: a free is its free_requested (the point where the
    caching allocator may reuse the block in stream order), else its free_completed; segments
    (the allocator's own reserve) keep their names."""
    freed = set()
    for i, e in enumerate(trace):
        if not isinstance(e, dict) or "action" not in e:
            fail(f"{path}: device trace entry {i} is not an event (no 'action')")
        try:
            action, addr = e["action"], int(e.get("addr", 0))
            size, stream = int(e.get("size", 0)), int(e.get("stream", 0))
            when = float(e.get("time_us", 0)) / 1e6
        except (TypeError, ValueError) as err:
            fail(f"{path}: device trace entry {i} ({e.get('action')}): {err}")
        if action == "alloc":
            freed.discard(addr)
            yield [1, f"{when:.6f}", "allocate", hex(addr), size, hex(stream)]
        elif action in ("free_requested", "free_completed") and addr not in freed:
            freed.add(addr)
            yield [1, f"{when:.6f}", "deallocate", hex(addr), size, hex(stream)]
        elif action == "oom":
            yield [1, f"{when:.6f}", "allocate failure", "0x0", size, hex(stream)]
        elif action in ("segment_alloc", "segment_free"):
            yield [1, f"{when:.6f}", action, hex(addr), size, hex(stream)]


def to_csv(path, device):
    traces = load(path)["device_traces"]
    if device is None:
        device = next((d for d, t in enumerate(traces) if t), 0)
    if device >= len(traces):
        fail(f"{path}: no device {device} (the snapshot has {len(traces)})")
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(HEADER)
    for row in rows(path, traces[device]):
        out.writerow(row)


def from_csv(out_path):
    trace = []
    reader = csv.reader(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8"))
    for n, row in enumerate(reader, 1):
        if n == 1:
            continue
        try:
            _, when, action, addr, size, stream = row
            ev = {"action": {"allocate": "alloc", "deallocate": "free_requested",
                             "allocate failure": "oom", "segment_alloc": "segment_alloc",
                             "segment_free": "segment_free"}[action],
                  "addr": int(addr, 16), "size": int(size), "stream": int(stream, 16),
                  "time_us": int(float(when) * 1e6), "frames": []}
        except (ValueError, KeyError) as err:
            fail(f"standard input line {n}: {err}")
        trace.append(ev)
        if ev["action"] == "free_requested":
            trace.append(dict(ev, action="free_completed"))
    with open(out_path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [trace]}, f)


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) in (3, 5) and argv[1] == "to-csv":
        device = None
        if len(argv) == 5:
            if argv[3] != "--device" or not argv[4].isdigit():
                print(__doc__, file=sys.stderr)
                return 1
            device = int(argv[4])
        to_csv(argv[2], device)
        return 0
    if len(argv) == 3 and argv[1] == "from-csv":
        from_csv(argv[2])
        return 0
    print(__doc__, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
