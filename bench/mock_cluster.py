#!/usr/bin/env python3
"""librdkafka's mock Kafka cluster as a process of its own: the peer the benchmarks measure against.

librdkafka, the C library under confluent-kafka, carries an in-memory Kafka cluster for its own
tests (the rd_kafka_mock_* functions of its public header rdkafka_mock.h, exported by the shared
object that the confluent-kafka wheel bundles). This script loads that object with ctypes, so it
needs nothing beyond the project's test dependencies; it starts --brokers brokers, each listening
on 127.0.0.1 at a port the kernel picks (the mock API takes no port), prints

    BOOTSTRAP=127.0.0.1:PORT[,127.0.0.1:PORT...]

on stdout once they accept connections, and stops at SIGTERM or SIGINT (Ctrl-C).

    python bench/mock_cluster.py [--brokers 1] [--topic NAME:PARTITIONS[:RF]]... [--java-compat]
                                 [--debug [CONTEXTS]] [--library PATH]

--topic creates a topic beforehand: the mock has no CreateTopics, and its auto-creation on
Metadata or Produce gives 4 partitions. --java-compat makes the mock usable by the Apache Kafka
Java client (see JavaFront below); it costs a hop through Python per request, so only the Java
benchmark uses it. The librdkafka found is the one confluent-kafka loads (--library or
$KSHIM_LIBRDKAFKA name another build).

What the mock is not (librdkafka 2.16, rdkafka_mock.c): it keeps at most 5 MiB per partition
(older batches are dropped, so a consumer reads only the tail), keeps everything in memory,
answers ApiVersions up to v2 only, has no CreateTopics, DeleteTopics, DescribeConfigs or group
listing, and no read_committed filtering.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import glob
import os
import signal
import struct
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from wire import codec  # noqa: E402  (the project's own codecs, for the one answer the front writes)
from wire.headers import encode_response_header, frame  # noqa: E402

HOST = "127.0.0.1"  # the mock binds INADDR_LOOPBACK itself; the Java front follows it
RD_KAFKA_PRODUCER = 0  # rd_kafka_type_t: the owner handle only hosts the cluster, any type would do
API_VERSIONS = 18
UNSUPPORTED_VERSION = 35
MOCK_API_VERSIONS_MAX = 2  # rdkafka_mock_handlers.c: ApiVersions is implemented up to v2

# Versions the mock advertises but parses or answers wrongly for the Java client (kafka-clients
# 4.3): JoinGroup v6 requests are misread, SyncGroup v4 requests under-read, and LeaveGroup v3+
# answers lack the members array. Capping the advertised maximum makes the client pick a version
# that works. {api_key: max_version}
JAVA_VERSION_CAPS = {11: 5, 13: 2, 14: 3}


def find_librdkafka(explicit: str | None) -> str:
    """The librdkafka that confluent-kafka itself uses, so the mock matches the benchmark's clients."""
    if explicit:
        return explicit
    try:
        import confluent_kafka  # loads its librdkafka, so /proc/self/maps names the very file
    except ImportError:
        pass
    else:
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    path = line.split()[-1]
                    if os.path.basename(path).startswith("librdkafka"):
                        return path
        except OSError:  # no procfs (macOS): look where the wheels bundle it
            pass
        site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
        for pattern in ("confluent_kafka.libs/librdkafka*", "confluent_kafka/.dylibs/librdkafka*"):
            hits = sorted(glob.glob(os.path.join(site, pattern)))
            if hits:
                return hits[0]
    system = ctypes.util.find_library("rdkafka")  # a source build of confluent-kafka links the system one
    if system:
        return system
    raise SystemExit("mock_cluster: librdkafka not found: pip install confluent-kafka (or pass --library PATH)")


def _bind(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> Callable[..., Any]:
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


class MockCluster:
    """An owner rd_kafka_t handle and the mock cluster created on it (rdkafka_mock.h)."""

    def __init__(self, library: str, brokers: int, debug: str | None) -> None:
        lib = ctypes.CDLL(library)
        P, S, I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        self.version = _bind(lib, "rd_kafka_version_str", S)().decode()
        conf_new = _bind(lib, "rd_kafka_conf_new", P)
        conf_set = _bind(lib, "rd_kafka_conf_set", I, P, S, S, S, ctypes.c_size_t)
        conf_destroy = _bind(lib, "rd_kafka_conf_destroy", None, P)
        rd_new = _bind(lib, "rd_kafka_new", P, I, P, S, ctypes.c_size_t)
        self._destroy_handle = _bind(lib, "rd_kafka_destroy", None, P)
        cluster_new = _bind(lib, "rd_kafka_mock_cluster_new", P, P, I)
        self._destroy_cluster = _bind(lib, "rd_kafka_mock_cluster_destroy", None, P)
        self._bootstraps = _bind(lib, "rd_kafka_mock_cluster_bootstraps", S, P)
        self._topic_create = _bind(lib, "rd_kafka_mock_topic_create", I, P, S, I, I)
        self._set_apiversion = _bind(lib, "rd_kafka_mock_set_apiversion", I, P,
                                     ctypes.c_int16, ctypes.c_int16, ctypes.c_int16)
        self._err2str = _bind(lib, "rd_kafka_err2str", S, I)
        self._lib = lib
        self.brokers = brokers

        errstr = ctypes.create_string_buffer(512)
        conf = conf_new()
        settings = {"client.id": "kshim-bench-mock-owner"}
        if debug:
            settings["debug"] = debug
        else:
            # the owner has no bootstrap.servers on purpose (it never connects): hide that notice
            settings["log_level"] = "4"
        for key, value in settings.items():
            if conf_set(conf, key.encode(), value.encode(), errstr, len(errstr)) != 0:  # RD_KAFKA_CONF_OK
                conf_destroy(conf)
                raise SystemExit(f"mock_cluster: {key}={value}: {errstr.value.decode()}")
        self._rk = rd_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))  # owns conf from here on success
        if not self._rk:
            conf_destroy(conf)
            raise SystemExit(f"mock_cluster: rd_kafka_new: {errstr.value.decode()}")
        self._cluster = cluster_new(self._rk, brokers)
        if not self._cluster:
            self._destroy_handle(self._rk)
            raise SystemExit(f"mock_cluster: rd_kafka_mock_cluster_new({brokers}) failed")

    def _check(self, err: int, what: str) -> None:
        if err:
            raise SystemExit(f"mock_cluster: {what}: {self._err2str(err).decode()}")

    def ports(self) -> list[int]:
        """The listeners' ports by broker id (1..N): the bootstrap string lists brokers in id order."""
        return [int(hp.rsplit(":", 1)[1]) for hp in self._bootstraps(self._cluster).decode().split(",")]

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        self._check(self._topic_create(self._cluster, name.encode(), partitions, replication_factor),
                    f"create topic {name}")

    def cap_version(self, api_key: int, max_version: int) -> None:
        self._check(self._set_apiversion(self._cluster, api_key, 0, max_version),
                    f"ApiKey {api_key} max v{max_version}")

    def advertise(self, broker_id: int, host: str, port: int) -> None:
        """Name another address for a broker in Metadata and FindCoordinator answers."""
        try:
            fn = _bind(self._lib, "rd_kafka_mock_broker_set_host_port", None,
                       ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int)
        except AttributeError:
            raise SystemExit(f"mock_cluster: --java-compat needs librdkafka 2.9 or later "
                             f"(rd_kafka_mock_broker_set_host_port), this is {self.version}") from None
        fn(self._cluster, broker_id, host.encode(), port)

    def close(self) -> None:
        # the cluster first: it was created on the handle and uses it until it is gone
        self._destroy_cluster(self._cluster)
        self._destroy_handle(self._rk)


class JavaFront:
    """A relay in front of one mock broker that fixes the first exchange for the Java client.

    The Java client opens every connection with ApiVersions at its newest version (v3+, flexible).
    The mock supports only v0-v2 and answers a newer request in a layout the Java client misreads
    (read as v4 it holds no APIs and a throttle time of about 20 minutes). A Kafka broker answers
    such a request in the v0 layout with UNSUPPORTED_VERSION and its ApiVersions range, and the
    client retries at a version both know; the relay answers that way itself, then passes the
    retry and everything after it through unchanged."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port

    async def connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            client_w.close()
            return
        try:
            first = await self._answer_new_api_versions(client_r, client_w)
            upstream_w.write(first)
            await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for w in (client_w, upstream_w):
                w.close()

    @staticmethod
    async def _answer_new_api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        """Answer ApiVersions requests the mock cannot read; return the first frame for the mock."""
        while True:  # bounded by the client: it retries at v2 or below after one refusal
            size = await reader.readexactly(4)
            request = await reader.readexactly(struct.unpack(">i", size)[0])
            api_key, version, correlation_id = struct.unpack_from(">hhi", request)
            if api_key != API_VERSIONS or version <= MOCK_API_VERSIONS_MAX:
                return size + request
            body = codec.encode(API_VERSIONS, 0, "response", {
                "error_code": UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": API_VERSIONS, "min_version": 0, "max_version": MOCK_API_VERSIONS_MAX}]})
            writer.write(frame(encode_response_header(API_VERSIONS, 0, correlation_id) + body))
            await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(1 << 18):
            writer.write(chunk)
            await writer.drain()
    finally:
        writer.close()  # one side gone: end the other too, as a direct connection would


async def serve(cluster: MockCluster, java_compat: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ports = cluster.ports()
    fronts: list[asyncio.Server] = []
    if java_compat:
        for broker_id, upstream in enumerate(list(ports), start=1):
            server = await asyncio.start_server(JavaFront(upstream).connection, HOST, 0)
            fronts.append(server)
            ports[broker_id - 1] = server.sockets[0].getsockname()[1]
            cluster.advertise(broker_id, HOST, ports[broker_id - 1])  # clients come back through the front
    print("BOOTSTRAP=" + ",".join(f"{HOST}:{port}" for port in ports), flush=True)
    await stop.wait()
    for server in fronts:
        server.close()


def parse_topic(spec: str, brokers: int) -> tuple[str, int, int]:
    name, _, rest = spec.partition(":")
    numbers = [int(n) for n in rest.split(":")] if rest else []
    if not name or len(numbers) > 2 or any(n < 1 for n in numbers):
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: want NAME:PARTITIONS[:RF]")
    partitions = numbers[0] if numbers else 4  # as the mock's auto-creation
    replication_factor = numbers[1] if len(numbers) > 1 else min(3, brokers)  # likewise
    return name, partitions, replication_factor


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=1, help="brokers in the cluster, ids 1..N (default 1)")
    ap.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS[:RF]",
                    help="create this topic before the bootstrap line (repeatable; RF defaults to min(3, brokers))")
    ap.add_argument("--java-compat", action="store_true",
                    help="front each broker with a relay that the Apache Kafka Java client can talk to")
    ap.add_argument("--debug", nargs="?", const="mock,protocol", metavar="CONTEXTS",
                    help="librdkafka debug contexts logged to stderr (default with the flag: mock,protocol)")
    ap.add_argument("--library", default=os.environ.get("KSHIM_LIBRDKAFKA"), metavar="PATH",
                    help="the librdkafka shared object (default: confluent-kafka's)")
    args = ap.parse_args(argv)
    if args.brokers < 1:
        ap.error("--brokers must be at least 1")
    try:
        topics = [parse_topic(spec, args.brokers) for spec in args.topic]
    except (ValueError, argparse.ArgumentTypeError) as e:
        ap.error(str(e))

    library = find_librdkafka(args.library)
    cluster = MockCluster(library, args.brokers, args.debug)
    try:
        for name, partitions, rf in topics:
            cluster.create_topic(name, partitions, rf)
        if args.java_compat:
            for api_key, max_version in JAVA_VERSION_CAPS.items():
                cluster.cap_version(api_key, max_version)
        print(f"mock_cluster: librdkafka {cluster.version} ({library}), {args.brokers} broker(s), "
              f"pid {os.getpid()}", file=sys.stderr, flush=True)
        asyncio.run(serve(cluster, args.java_compat))
    except KeyboardInterrupt:  # Ctrl-C before the loop took over the signal
        pass
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
