"""The kernel's own cost of moving bytes over loopback TCP on this machine: the floor under any
broker's CPU per 200 MB (docs/benchmarks.md, "Floors and the client's ceiling").

A broker that serves a consumer must at least send the bytes (here: os.sendfile from a file, or
pread + sendall, Kafka's and the copy path's ways) and a broker that takes a producer's bytes must
at least receive them (recv_into a reused buffer). This measures the CPU (user + system, of the
thread doing it, getrusage RUSAGE_THREAD) of just that, per 200 MB, on a file of --mb MB read
--passes times, median of --runs, alternating the ways. No broker is involved.

    python bench/loopback_floor.py [--mb 100] [--passes 4] [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import tempfile
import threading

CHUNK = 1 << 20  # as the broker's sender: at most 1 MiB a call


def thread_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def one_run(path: str, size: int, passes: int, way: str) -> tuple[float, float]:
    """(sender CPU, receiver CPU) in seconds for passes x size bytes over one loopback connection."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        sender, _ = server.accept()
    received: list[float] = []

    def receive() -> None:
        buf = bytearray(CHUNK)
        total, start = 0, thread_cpu()
        while total < size * passes:  # bounded: ends when everything sent has arrived
            n = client.recv_into(buf)
            if n == 0:
                break
            total += n
        received.append(thread_cpu() - start)

    receiver = threading.Thread(target=receive)
    receiver.start()
    fd = os.open(path, os.O_RDONLY)
    try:
        start = thread_cpu()
        for _ in range(passes):
            pos = 0
            while pos < size:
                n = min(CHUNK, size - pos)
                if way == "sendfile":
                    pos += os.sendfile(sender.fileno(), fd, pos, n)
                else:
                    sender.sendall(os.pread(fd, n, pos))
                    pos += n
        sent = thread_cpu() - start
    finally:
        os.close(fd)
        receiver.join(120)
        sender.close()
        client.close()
    return sent, received[0] if received else float("nan")


def measure(mb: int = 100, passes: int = 4, runs: int = 5) -> dict[str, dict[str, float]]:
    """Per way, the median sender and receiver CPU seconds per 200 MB."""
    size = mb * 1_000_000
    per_200mb = 200_000_000 / (size * passes)
    results: dict[str, list[tuple[float, float]]] = {"sendfile": [], "pread+send": []}
    with tempfile.NamedTemporaryFile(prefix="kshim-floor-") as f:
        f.write(os.urandom(size))
        f.flush()
        for _ in range(runs):
            for way in results:
                results[way].append(one_run(f.name, size, passes, way))
    return {way: {"sender_s": statistics.median(r[0] for r in rs) * per_200mb,
                  "receiver_s": statistics.median(r[1] for r in rs) * per_200mb} for way, rs in results.items()}


def markdown(floor: dict[str, dict[str, float]]) -> str:
    lines = ["| way | sender (a consume's floor) | receiver (a produce's floor) |", "|---|---:|---:|"]
    lines += [f"| {way} | {v['sender_s']:.2f} s | {v['receiver_s']:.2f} s |" for way, v in floor.items()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(f"CPU per 200 MB over loopback TCP, median of {args.runs} ({args.mb} MB x {args.passes} per run)")
    print(markdown(measure(args.mb, args.passes, args.runs)))


if __name__ == "__main__":
    main()
