"""One broker's Prometheus metrics (prometheus_client), by Kafka's JMX names as the Prometheus JMX
exporter spells them where Kafka has the metric, `kshim_...` where it does not.

Counted as requests pass through the server (`observe`): requests and their time per API, bytes
in (produce records) and out (fetch records, followers included, as Kafka counts them) per topic.
Read from the broker when scraped (`collect`): each hosted replica's offsets, partition and leader
counts, under-replicated partitions, ISR shrinks and expands of the partitions it leads, and the
groups and transactions its coordinators hold. Each broker has a registry of its own (several
brokers may share a process in tests); the console (kshim.console) serves them at /metrics.

Requests are counted in plain dicts, and prometheus_client is imported at the first scrape only:
a broker nobody scrapes never loads it (it is a tenth of `kshim serve`'s import time), and a
request costs a dict update instead of prometheus_client's locked counters.
"""
from __future__ import annotations

import bisect
import struct
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol

from kshim.cluster.image import MetadataImage
from kshim.replica.partition import Partition
from kshim.replication.isr import IsrChanges
from wire.codec import message

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

PRODUCE, FETCH = 0, 1
# RecordBatch v2: base offset (8) and length (4) are the log overhead; the records count is the
# header's last field, at byte 57
LENGTH_AT, LOG_OVERHEAD, RECORDS_COUNT_AT, BATCH_HEADER_BYTES = 8, 12, 57, 61
# Kafka's request-time histogram is in milliseconds; its buckets, in ms, span a local broker's range
TIME_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


def api_name(api_key: int) -> str:
    """Kafka's request name (`Produce`, `Fetch`, ...), as its RequestMetrics label them."""
    try:
        return message(api_key, "request").name.removesuffix("Request")
    except KeyError:
        return f"api-{api_key}"


class MetricsHost(Protocol):
    """What the metrics read of the broker when scraped."""
    @property
    def node_id(self) -> int: ...

    @property
    def image(self) -> MetadataImage: ...

    def replicas(self) -> list[Partition]: ...


@dataclass
class CoordinatorCounts:
    """Group states and transaction states, counted by whoever holds the coordinators."""
    groups: Mapping[str, int]
    transactions: Mapping[str, int]


class _Scraped:
    """A prometheus_client collector (duck-typed: the base class would import prometheus_client)."""

    def __init__(self, metrics: "BrokerMetrics") -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        yield from self.metrics.counted()
        yield from self.metrics.scrape()


class BrokerMetrics:
    def __init__(self, host: MetricsHost, isr_changes: IsrChanges | None = None,
                 coordinators: Callable[[], CoordinatorCounts] | None = None) -> None:
        self.host = host
        self.isr_changes = isr_changes if isr_changes is not None else IsrChanges()
        self.coordinators = coordinators
        self._registry: CollectorRegistry | None = None  # made at the first scrape
        # API key -> [requests, sum of ms, then one count per TIME_BUCKETS_MS bucket and +Inf]
        self._per_api: dict[int, list[float]] = {}
        self.bytes_in: dict[str, int] = {}  # topic -> record bytes appended by produce requests
        self.messages_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}  # topic -> record bytes fetched (consumers and followers)

    def observe(self, api_key: int, request: Any, response: Any, seconds: float) -> None:
        """One request handled (its response ready) after `seconds`."""
        counts = self._per_api.get(api_key)
        if counts is None:
            counts = self._per_api[api_key] = [0.0] * (3 + len(TIME_BUCKETS_MS))
        ms = seconds * 1000
        counts[0] += 1
        counts[1] += ms
        counts[2 + bisect.bisect_left(TIME_BUCKETS_MS, ms)] += 1  # the first bucket whose bound is >= ms
        try:
            if api_key == PRODUCE and request is not None:
                self._produced(request, response)
            elif api_key == FETCH and isinstance(response, Mapping):
                for t in response.get("responses") or ():
                    n = sum(len(p["records"]) for p in t["partitions"] if p.get("records") is not None)
                    if n:
                        topic = self._topic_name(t)
                        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + n
        except (AttributeError, KeyError, TypeError):  # a malformed request was answered with an error
            pass

    def _produced(self, request: Any, response: Any) -> None:
        """Bytes and records of the partitions appended (as Kafka counts them, after the append);
        an acks=0 produce has no answer and counts as appended."""
        failed = set()
        if isinstance(response, Mapping):
            failed = {(self._topic_name(t), p["index"]) for t in response.get("responses") or ()
                      for p in t["partition_responses"] if p["error_code"]}
        for t in request.topic_data:
            name = self._topic_name(t)  # v13 names topics by id
            size = count = 0
            for pd in t.partition_data:
                if pd.records is not None and (name, pd.index) not in failed:
                    size += len(pd.records)
                    count += record_count(pd.records)
            if size:
                self.bytes_in[name] = self.bytes_in.get(name, 0) + size
                self.messages_in[name] = self.messages_in.get(name, 0) + count

    def _topic_name(self, t: Mapping[str, Any]) -> str:
        """A request's or response's topic, by name (Produce's `name`, Fetch's `topic`) or id."""
        name = t.get("name") or t.get("topic")
        if name:
            return str(name)
        topic_id = t.get("topic_id")
        info = self.host.image.topic_by_id(topic_id) if isinstance(topic_id, uuid.UUID) else None
        return info.name if info else str(topic_id)

    def exposition(self) -> bytes:
        """The text format (version 0.0.4) of every metric of this broker."""
        from prometheus_client import CollectorRegistry, generate_latest  # lazy: see the module docstring
        if self._registry is None:
            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(_Scraped(self))
        return generate_latest(self._registry)

    def counted(self) -> Iterator[Any]:
        """What observe() counted, as prometheus_client's Counter and Histogram would expose it."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests handled, by API",
                                       labels=["request"])
        total_time = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                           "Time from a request's arrival to its response being ready, in ms, by API",
                                           labels=["request"])
        bounds = [floatToGoString(b) for b in TIME_BUCKETS_MS] + ["+Inf"]
        for api_key, counts in sorted(self._per_api.items()):
            name = api_name(api_key)
            requests.add_metric([name], counts[0])
            cumulative, buckets = 0.0, []
            for bound, n in zip(bounds, counts[2:]):
                cumulative += n
                buckets.append((bound, cumulative))
            total_time.add_metric([name], buckets, counts[1])
        yield requests
        yield total_time
        for name, text, values in (
                ("bytesin", "Record bytes appended by produce requests, by topic", self.bytes_in),
                ("messagesin", "Records produced to this broker, by topic", self.messages_in),
                ("bytesout", "Record bytes fetched from this broker (consumers and followers), by topic",
                 self.bytes_out)):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", text, labels=["topic"])
            for topic, n in sorted(values.items()):
                family.add_metric([topic], n)
            yield family

    def scrape(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        labels = ["topic", "partition"]
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "First offset of the replica's log", labels=labels)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Offset after the replica's last record", labels=labels)
        hw = GaugeMetricFamily("kshim_partition_high_watermark",
                               "The replica's high watermark: records below it are COMMITTED", labels=labels)
        lso = GaugeMetricFamily("kshim_partition_last_stable_offset",
                                "The replica's last stable offset: read_committed reads stop here", labels=labels)
        isr = GaugeMetricFamily("kafka_cluster_partition_insyncreplicascount",
                                "In-sync replicas of a partition this broker leads", labels=labels)
        under = GaugeMetricFamily("kafka_cluster_partition_underreplicated",
                                  "1 when a partition this broker leads has fewer in-sync replicas than replicas",
                                  labels=labels)
        partitions = leaders = under_count = under_min = 0
        for p in sorted(self.host.replicas(), key=lambda r: (r.topic, r.index)):
            key = [p.topic, str(p.index)]
            partitions += 1
            start.add_metric(key, p.log_start_offset)
            end.add_metric(key, p.log_end_offset)
            hw.add_metric(key, p.high_watermark)
            lso.add_metric(key, p.last_stable_offset)
            if p.is_leader:
                leaders += 1
                lagging = len(p.isr) < len(p.replicas)
                under_count += lagging
                under_min += len(p.isr) < p.min_insync_replicas
                isr.add_metric(key, len(p.isr))
                under.add_metric(key, int(lagging))
        yield from (start, end, hw, lso, isr, under)
        for name, text, value in (
                ("partitioncount", "Partition replicas hosted by this broker", partitions),
                ("leadercount", "Partitions this broker leads", leaders),
                ("underreplicatedpartitions", "Partitions led here with fewer in-sync replicas than replicas",
                 under_count),
                ("underminisrpartitioncount", "Partitions led here with fewer in-sync replicas than "
                                              "min.insync.replicas", under_min)):
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", text, value=value)
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks proposed by this broker "
                                  "and accepted by the controller", value=self.isr_changes.shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expands proposed by this broker "
                                  "and accepted by the controller", value=self.isr_changes.expands)
        if self.coordinators is not None:
            counts = self.coordinators()
            groups = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                       "Consumer groups this broker coordinates, by state", labels=["state"])
            for state, n in sorted(counts.groups.items()):
                groups.add_metric([state], n)
            txns = GaugeMetricFamily("kshim_transaction_coordinator_transactions",
                                     "Transactional ids this broker coordinates, by state", labels=["state"])
            for state, n in sorted(counts.transactions.items()):
                txns.add_metric([state], n)
            yield groups
            yield txns


def record_count(data: bytes | memoryview) -> int:
    """Records in a run of RecordBatch v2 (each header's count); a torn tail counts nothing."""
    view = memoryview(data)
    pos = total = 0
    while pos + BATCH_HEADER_BYTES <= len(view):
        (length,) = struct.unpack_from(">i", view, pos + LENGTH_AT)
        (count,) = struct.unpack_from(">i", view, pos + RECORDS_COUNT_AT)
        total += max(count, 0)
        pos += LOG_OVERHEAD + max(length, 0)
    return total


def count_states(states: Any) -> dict[str, int]:
    return dict(Counter(states))
