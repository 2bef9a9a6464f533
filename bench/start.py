"""Start to ready of one broker, a baseline revision against the working tree, side by side.

Each round starts, in turn, `python -m kshim serve --ephemeral --port 0` of a baseline revision (a
git worktree of --base) and of this checkout, each measured from the exec to its `kshim ready:`
line (what the pytest plugin and compat_tests/kshim_process.py wait for), then, with --peer-mock,
librdkafka's mock cluster (bench/mock_cluster.py) from the exec to its `BOOTSTRAP=` line, for
scale. Rounds alternate the targets so that both see the same load; the table gives per target
the median and p90 wall time to ready, the CPU seconds the process had spent then (load changes
them less than the wall time) and the ratio of medians to the baseline.

    python bench/start.py [--base REV] [--rounds 10] [--peer-mock] [--json PATH] [-- serve options]

Before the rounds each tree's kshim and wire are compiled to byte code and each target is started
once unmeasured with byte-code writing on, so every target starts warm (as an installed package
does: pip compiles it). Each process runs with its tree first on the path and is stopped with
SIGTERM by its PID once ready; every wait has a deadline. Figures: docs/benchmarks.md ("Start time").
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the revision this benchmark was written against: the start before it loaded less
DEFAULT_BASE = "d09eb44"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
MAX_ROUNDS = 100


@dataclass
class Target:
    name: str
    argv: list[str]
    ready_prefix: str
    cwd: Path
    env: dict[str, str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def cpu_s(pid: int) -> float:
    """utime + stime of a running process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_once(target: Target, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s) from the exec to the target's ready line; the process is stopped after."""
    started = time.monotonic()
    proc = subprocess.Popen(target.argv, cwd=target.cwd, env=env or target.env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        pending = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while (left := started + READY_TIMEOUT_S - time.monotonic()) > 0:
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break  # the process ended before its ready line
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line.decode(errors="replace").startswith(target.ready_prefix):
                        return time.monotonic() - started, cpu_s(proc.pid)
        raise RuntimeError(f"{target.name}: no {target.ready_prefix!r} line within {READY_TIMEOUT_S:.0f} s")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


def kshim_target(name: str, tree: Path, extra: list[str]) -> Target:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return Target(name, [sys.executable, "-m", "kshim", "serve", "--ephemeral", "--port", "0", *extra],
                  "kshim ready:", tree, env)


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def summary(targets: list[Target]) -> list[dict]:
    base = statistics.median(targets[0].wall)
    return [{"target": t.name, "runs": len(t.wall), "ready_median_s": statistics.median(t.wall),
             "ready_p90_s": p90(t.wall), "cpu_median_s": statistics.median(t.cpu),
             "ratio": statistics.median(t.wall) / base} for t in targets]


def markdown(rows: list[dict]) -> str:
    out = ["| target | ready median s | ready p90 s | CPU median s | ratio to base |", "|---|---:|---:|---:|---:|"]
    out += [f"| {r['target']} | {r['ready_median_s']:.3f} | {r['ready_p90_s']:.3f} | {r['cpu_median_s']:.3f} "
            f"| {r['ratio']:.2f}x |" for r in rows]
    return "\n".join(out)


def add_worktree(rev: str, parent: Path) -> Path:
    path = parent / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), rev],
                   check=True, timeout=120)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=DEFAULT_BASE, help=f"baseline git revision (default {DEFAULT_BASE})")
    ap.add_argument("--rounds", type=int, default=10, help=f"alternating rounds, at most {MAX_ROUNDS} (default 10)")
    ap.add_argument("--peer-mock", action="store_true", help="also start librdkafka's mock cluster, for scale")
    ap.add_argument("--json", metavar="PATH", help="write every run and the summary there")
    ap.add_argument("extra", nargs="*", help="options for kshim serve (after --)")
    args = ap.parse_args()
    if not 1 <= args.rounds <= MAX_ROUNDS:
        ap.error(f"--rounds must be 1..{MAX_ROUNDS}")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], check=True,
                         capture_output=True, text=True, timeout=30).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kshim-start-") as tmp:
        base_tree = add_worktree(rev, Path(tmp))
        try:
            targets = [kshim_target(f"kshim {rev} (base)", base_tree, args.extra),
                       kshim_target("kshim working tree", ROOT, args.extra)]
            if args.peer_mock:
                targets.append(Target("librdkafka mock cluster", [sys.executable, str(ROOT / "bench" / "mock_cluster.py")],
                                      "BOOTSTRAP=", ROOT, dict(os.environ)))
            for tree in (base_tree, ROOT):
                for package in ("kshim", "wire"):
                    compileall.compile_dir(str(tree / package), quiet=2)
            for target in targets:  # warm: byte code and any cache a revision writes as it runs
                start_once(target, {k: v for k, v in target.env.items() if k != "PYTHONDONTWRITEBYTECODE"})
            for _ in range(args.rounds):
                for target in targets:
                    wall, cpu = start_once(target)
                    target.wall.append(wall)
                    target.cpu.append(cpu)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], check=False,
                           timeout=120)
    rows = summary(targets)
    print(f"start to ready, {args.rounds} alternating rounds: `kshim serve --ephemeral --port 0 {' '.join(args.extra)}`")
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"base": rev, "rounds": args.rounds, "summary": rows,
                                               "runs": {t.name: {"wall_s": t.wall, "cpu_s": t.cpu} for t in targets}},
                                              indent=1))


if __name__ == "__main__":
    main()
