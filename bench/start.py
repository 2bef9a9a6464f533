"""Start-to-ready time of one broker: `python -m kshim serve` on a fresh data dir until its
`kshim ready` line, N runs (default 5), median and spread. Also `python -c "import kshim.cli"`,
the import alone, and `kshim ctl --help`, a command that starts no broker.

    python bench/start.py [--runs 5] [-- extra serve options]
    python bench/start.py --checkout ../before --checkout . [--runs 7]

With --checkout (repeatable), only the start to ready is measured, of each checkout's own
`kshim` (its directory first on the path, with this interpreter) in turn, run after run, so that
a change is compared with its base under the same load.

Each run is a new process on a free port (--port 0) and a new data dir, stopped with SIGTERM once
ready; every wait has a deadline. Besides wall time, each line gives the CPU seconds (user + system)
the process spent until then, which a machine loaded by other work changes much less than the
wall time. Numbers: docs/benchmarks.md ("Start time").
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY_TIMEOUT_S = 60.0


def cpu_s(pid: int) -> float:
    """utime + stime of a running process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_once(extra: list[str], checkout: Path | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="kshim-start-") as tmp:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "kshim", "serve", "--port", "0", "--data-dir",
                                 str(Path(tmp) / "data"), *extra], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=checkout)
        try:
            assert proc.stdout is not None
            deadline = started + READY_TIMEOUT_S
            for line in proc.stdout:  # ends when the process does
                if line.startswith("kshim ready:"):
                    return time.monotonic() - started, cpu_s(proc.pid)
                if time.monotonic() > deadline:
                    break
            raise RuntimeError("kshim serve did not print its ready line")
        finally:
            proc.terminate()
            proc.wait(30)


def command_once(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run([sys.executable, *argv], check=True, capture_output=True, timeout=READY_TIMEOUT_S)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def summary(name: str, runs: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in runs], [c for _, c in runs]
    return (f"{name:<28} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f})  "
            f"cpu median {statistics.median(cpu):.3f} s  ({len(runs)} runs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="a kshim source tree to start (repeatable): start to ready only, alternating")
    parser.add_argument("extra", nargs="*", help="options for kshim serve (after --)")
    args = parser.parse_args()
    if args.checkout:
        runs: dict[Path, list[tuple[float, float]]] = {c: [] for c in args.checkout}
        for _ in range(args.runs):
            for checkout in args.checkout:  # `python -m` puts the working directory first on the path
                runs[checkout].append(serve_once(args.extra, checkout.resolve()))
        for checkout, measured in runs.items():
            print(summary(f"{checkout}: start to ready", measured))
        return
    print(summary("import kshim.cli", [command_once(["-c", "import kshim.cli"]) for _ in range(args.runs)]))
    print(summary("kshim ctl --help", [command_once(["-m", "kshim", "ctl", "--help"]) for _ in range(args.runs)]))
    print(summary("kshim serve: start to ready", [serve_once(args.extra) for _ in range(args.runs)]))


if __name__ == "__main__":
    main()
