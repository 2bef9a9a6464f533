"""What it costs this machine to put new bytes into the page cache: the floor under a durable
broker's CPU per 200 MB produced (docs/benchmarks.md, "Floors and the client's ceiling").

A broker that keeps what it is sent must at least copy it into pages of the page cache (ext4, or
tmpfs for `kshim serve --ephemeral`). On bare metal that copy is a few GB/s whatever the pages.
In a VM whose balloon reports free pages to the host (virtio-balloon free page reporting, Linux
hands back free memory about 2 s after it was freed), a page the guest has not used lately is
backed again by the host on first touch, and that fault is the guest's CPU time: on the 2-core
development VM a write into fresh pages ran at ~430 MB/s, the same write into pages freed a
moment before at ~5 GB/s. librdkafka's mock keeps ~5 MB per partition and reuses its heap, so it
never pays this; every log-keeping broker does, once per byte stored.

This writes --mb MB in 1 MiB os.write calls to a new file in --dir and measures the writing
thread's CPU (CLOCK_THREAD_CPUTIME_ID) and the wall time, per 200 MB, two ways, --runs times:

  fresh     after a 3 s pause with nothing freed (the previous file was deleted before the pause)
  recycled  right after writing and deleting a file of the same size

The files are deleted at the end. No broker is involved.

    python bench/pagecache_floor.py [--dir DIR] [--mb 200] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

CHUNK = 1 << 20  # as the broker's appends: up to a request's batches a call
PAUSE_S = 3.0  # longer than Linux's page-reporting delay (2 s)


def write_new_file(directory: str, size: int) -> tuple[float, float]:
    """(CPU s, wall s) to write `size` bytes into a new file; the file is deleted afterwards."""
    buf = os.urandom(CHUNK)
    fd, path = tempfile.mkstemp(prefix="kshim-pagecache-floor-", dir=directory)
    try:
        cpu, wall = time.thread_time(), time.perf_counter()
        left = size
        while left > 0:  # bounded: `size` bytes, at least one byte a call
            left -= os.write(fd, buf[:min(CHUNK, left)])
        return time.thread_time() - cpu, time.perf_counter() - wall
    finally:
        os.close(fd)
        os.unlink(path)


def measure(directory: str | None = None, mb: int = 200, runs: int = 3) -> dict[str, dict[str, float]]:
    """Per way, the median CPU and wall seconds per 200 MB written into new page-cache pages."""
    directory = directory or tempfile.gettempdir()
    size = mb * 1_000_000
    per_200mb = 200_000_000 / size
    results: dict[str, list[tuple[float, float]]] = {"fresh": [], "recycled": []}
    for _ in range(runs):
        time.sleep(PAUSE_S)
        results["fresh"].append(write_new_file(directory, size))
        write_new_file(directory, size)  # leaves `size` bytes of just-freed pages behind
        results["recycled"].append(write_new_file(directory, size))
    return {way: {"cpu_s": statistics.median(r[0] for r in rs) * per_200mb,
                  "wall_s": statistics.median(r[1] for r in rs) * per_200mb} for way, rs in results.items()}


def markdown(floor: dict[str, dict[str, float]]) -> str:
    lines = ["| pages written | CPU s per 200 MB | MB/s |", "|---|---:|---:|"]
    lines += [f"| {way} | {v['cpu_s']:.3f} | {200 / v['wall_s']:,.0f} |" for way, v in floor.items()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where to write (default: the temp dir; use the broker's data dir's file system)")
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"writing {args.mb} MB into new page-cache pages in {args.dir or tempfile.gettempdir()}, "
          f"median of {args.runs}")
    print(markdown(measure(args.dir, args.mb, args.runs)))


if __name__ == "__main__":
    main()
