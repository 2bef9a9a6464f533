"""The web console and /metrics of `kshim serve`, seen as a user sees them: a real browser (Debian's
headless chromium, driven by playwright) on a 3-broker cluster, and a Prometheus scrape parsed
with prometheus_client's own parser.

The browser test produces, pauses a follower with the page's own button, produces again and
watches the leader's bar grow an UNCOMMITTED region (high watermark below the log end) while the
paused follower's bar stands still; then the ISR shrinks, the region becomes COMMITTED, and the
page's resume button brings the follower back into the ISR at the leader's log end. The page is
never reloaded: every change arrives over server-sent events. On another cluster, a page opened
after a follower was paused while nobody watched shows the offsets `kshim ctl status` shows for
it, and the brokers' abnormal states in colour. On a single broker, /metrics is
scraped after produce, consume and an open transaction, which the console's state lists with its
partition's last stable offset below the high watermark.

KSHIM_CONSOLE_SCREENSHOT=docs/console.png python -m pytest compat_tests/test_console.py -k browser
writes the page at its most telling moment (a record range UNCOMMITTED) where docs/console.md shows it.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer
from playwright.sync_api import sync_playwright
from kafka.admin import KafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection
from wire.errors import ErrorCode
from wire.records import encode_batch

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 30_000
# the window in which the paused follower is still in the ISR, so the leader's new records stay
# UNCOMMITTED: the follower leaves the ISR after the lag time, or when fenced (session timeout)
REPLICA_LAG_MS = 12000
SESSION_TIMEOUT_MS = 20000


def console_url(process: KshimProcess) -> str:
    ready = next(line for line in process.output if line.startswith("kshim ready:"))
    assert "console http://127.0.0.1:" in ready, ready
    return ready.split("console ", 1)[1].split()[0].rstrip(";")  # "; schema registry ..." may follow


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post(url: str, body: bytes, content_type: str) -> tuple[int, dict | str]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if e.headers.get("Content-Type") == "application/json" else text


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """/metrics parsed: (sample name, labels) -> value."""
    status, text = get(url + "metrics")
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(metrics: dict, name: str, **labels: str) -> float | None:
    return metrics.get((name, frozenset(labels.items())))


def produce(bootstrap: str, topic: str, count: int, acks: int | str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, retries=5, linger_ms=5)
    try:
        for f in [producer.send(topic, b"v" * 100, partition=0) for _ in range(count)]:
            f.get(timeout=20)
    finally:
        producer.close(timeout=5)


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=20000)
    try:
        consumer.subscribe([topic])
        seen = 0
        for _ in consumer:
            seen += 1
            if seen == count:
                break
        assert seen == count
        consumer.commit()
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------ the browser
class Browser:
    """Headless chromium on a thread of its own: playwright's sync API runs an event loop in the
    thread that started it, where the cluster helpers' own anyio.run could not run."""

    def __init__(self) -> None:
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self.playwright = self.run(lambda: sync_playwright().start())
        self.browser = self.run(lambda: self.playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS))

    def run(self, fn, *args):
        return self.thread.submit(fn, *args).result()

    def close(self) -> None:
        self.run(self.browser.close)
        self.run(self.playwright.stop)
        self.thread.shutdown()


class Page:
    def __init__(self, browser: Browser, url: str) -> None:
        self.b = browser
        self.page = browser.run(lambda: browser.browser.new_page(viewport={"width": 1280, "height": 900}))
        browser.run(self.page.set_default_timeout, PAGE_TIMEOUT_MS)
        browser.run(self.page.goto, url)

    def __getattr__(self, name: str):
        method = getattr(self.page, name)
        return lambda *args, **kwargs: self.b.run(lambda: method(*args, **kwargs))


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), "install Debian's chromium (apt-get install chromium; .ci/run does)"
    b = Browser()
    yield b
    b.close()


def replica(page: Page, topic: str, node: int) -> dict:
    """What the page shows of one replica (its row's data attributes), {} while it shows none."""
    return page.evaluate("""([topic, node]) => {
        const row = document.querySelector(`.partition[data-topic="${topic}"] .replica[data-node="${node}"]`);
        if (!row) return {};
        const d = row.dataset;
        return {hw: d.hw, leo: d.leo, lso: d.lso, in_isr: d.inIsr === "true", stale: d.stale === "true",
                uncommitted: !!row.querySelector(".seg-uncommitted"), committed: !!row.querySelector(".seg-committed")};
    }""", [topic, node])


def partition(page: Page, topic: str) -> dict:
    return page.evaluate("""(topic) => {
        const p = document.querySelector(`.partition[data-topic="${topic}"]`);
        return p ? {leader: Number(p.dataset.leader), isr: p.dataset.isr} : {};
    }""", topic)


def wait_page(page, predicate, message: str, timeout: float = 30.0):
    return wait_until(predicate, timeout=timeout, interval=0.1, message=message)


def test_browser_shows_replication_as_a_follower_is_paused_and_resumed(tmp_path, browser):
    cluster = Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", str(REPLICA_LAG_MS),
                      session_timeout_ms=SESSION_TIMEOUT_MS)
    with running(cluster):
        url = console_url(cluster.process)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic("clicks", 1, 3)])
        finally:
            admin.close()
        produce(cluster.bootstrap, "clicks", 20, "all")
        consume_and_commit(cluster.bootstrap, "clicks", "audit", 20)

        page = Page(browser, url)
        wait_page(page, lambda: all(replica(page, "clicks", n).get("hw") == "20" for n in range(3)),
                  "every replica at high watermark 20 on the page")
        loaded_version = page.evaluate("document.body.dataset.version")
        # the group, its member gone, with its commit and no lag
        page.wait_for_selector('[data-group="audit"] [data-group-offset="clicks-0"][data-lag="0"]')

        leader = partition(page, "clicks")["leader"]
        follower = next(n for n in range(3) if n != leader)
        page.click(f'button[data-action="pause"][data-node="{follower}"]')
        page.wait_for_selector(f'tr[data-broker="{follower}"][data-process="paused"]')

        # acks=1: the leader has the records, the paused follower (still in the ISR) has not. At
        # once: the ISR shrinks REPLICA_LAG_MS after the follower's last fetch, and this must be seen
        # before that. One Produce request to the leader itself: a client's metadata requests may go
        # to the paused broker (a CI run saw kafka-python wait 2 x 10 s on it, past the lag time)
        with RawConnection(f"127.0.0.1:{cluster.base_port + leader}") as conn:
            [answer] = conn.produce({("clicks", 0): encode_batch([(None, b"v" * 100)] * 10)}, acks=1).values()
        assert (answer.error_code, answer.base_offset) == (0, 20), answer
        shown = wait_page(page, lambda: (r := replica(page, "clicks", leader)).get("leo") == "30" and r,
                          "the leader's log end at 30")
        assert shown["hw"] == "20" and shown["uncommitted"], f"records 20-29 are not UNCOMMITTED on the page: {shown}"
        paused = replica(page, "clicks", follower)
        assert paused["stale"] and paused["leo"] == "20" and paused["in_isr"], paused
        if os.environ.get("KSHIM_CONSOLE_SCREENSHOT"):
            page.screenshot(path=os.environ["KSHIM_CONSOLE_SCREENSHOT"], full_page=True)

        # the paused follower does not answer a scrape; the leader does (a scrape gives each broker
        # 2 s, which a loaded CI machine can miss once: asked again until the deadline)
        def leader_up():
            m = scrape(url)
            return m if sample(m, "kshim_console_broker_scrape_up", broker=str(leader)) == 1 else None
        metrics = wait_until(leader_up, 20, message=f"the leader {leader} answering the console's scrape")
        assert sample(metrics, "kshim_console_broker_scrape_up", broker=str(follower)) == 0

        # the follower leaves the ISR: the leader's high watermark reaches its log end
        wait_page(page, lambda: not replica(page, "clicks", follower).get("in_isr"), "the follower out of the ISR")
        wait_page(page, lambda: (r := replica(page, "clicks", leader)).get("hw") == "30" and not r["uncommitted"],
                  "records 20-29 COMMITTED once the ISR shrank")
        assert str(follower) not in partition(page, "clicks")["isr"].split(",")

        page.click(f'button[data-action="resume"][data-node="{follower}"]')
        try:
            wait_page(page, lambda: (r := replica(page, "clicks", follower)).get("in_isr") and not r["stale"]
                      and r["leo"] == "30" and r["hw"] == "30", "the resumed follower back in the ISR at offset 30",
                      timeout=60)
        except AssertionError as e:  # what the page and the cluster showed, for whoever reads a CI log
            raise AssertionError(f"{e}: page {replica(page, 'clicks', follower)}, {partition(page, 'clicks')}; "
                                 f"ctl {cluster.partition('clicks')}, {cluster.broker(follower)}") from None
        # all of it without a reload: the page is the one loaded at the start, redrawn by events
        assert int(page.evaluate("document.body.dataset.version")) > int(loaded_version)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1

        metrics = scrape(url)
        assert sample(metrics, "kafka_server_replicamanager_isrshrinks_total", broker=str(leader)) >= 1
        assert sample(metrics, "kafka_server_replicamanager_isrexpands_total", broker=str(leader)) >= 1
        for node in range(3):
            assert sample(metrics, "kafka_log_log_logendoffset", broker=str(node), topic="clicks", partition="0") == 30
        page.close()


def cell_color(page: Page, node: int, column: str) -> str:
    """The text colour of a broker row's cell, by its column heading."""
    return page.evaluate("""([node, column]) => {
        const heads = [...document.querySelectorAll("#brokers th")].map((th) => th.textContent);
        const row = document.querySelector(`tr[data-broker="${node}"]`);
        return getComputedStyle(row.children[heads.indexOf(column)]).color;
    }""", [node, column])


def test_page_shows_what_ctl_status_shows_of_a_broker_paused_while_nobody_watched(tmp_path, browser):
    """A follower paused while no page was open shows on the page the offsets `kshim ctl status`
    shows for it, not older ones the console read before; a broker's abnormal states (paused,
    fenced, isolated) stand out from the normal ones; the fault form shows a whole error name."""
    with running(Cluster(tmp_path / "cluster", 3)) as cluster:
        url = console_url(cluster.process)
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            admin.create_topics([NewTopic("quiet", 1, 3)])
        finally:
            admin.close()
        produce(cluster.bootstrap, "quiet", 10, "all")
        # the console reads every broker once (an action refreshes it) and then nobody watches it,
        # as when a page was closed a while ago: it asks the brokers nothing more
        status, answer = post(url + "action", b'{"action": "fault-clear", "id": null, "node": null}',
                              "application/json")
        assert status == 200 and answer["ok"], answer
        produce(cluster.bootstrap, "quiet", 5, "all")
        leader = cluster.partition("quiet")["leader"]
        follower, other = [n for n in range(3) if n != leader]
        wait_until(lambda: cluster.partition("quiet")["replica_offsets"].get(str(follower), {}).get("log_end_offset")
                   == 15, timeout=30, message=f"ctl status: broker {follower} at log end 15")
        assert run_ctl(cluster.data_dir, "pause", str(follower)).returncode == 0
        expected = cluster.partition("quiet")["replica_offsets"][str(follower)]  # its last heartbeat's

        page = Page(browser, url)
        shown = wait_page(page, lambda: (r := replica(page, "quiet", follower)).get("leo") and r,
                          f"broker {follower}'s replica on the page")
        assert shown["stale"], shown
        assert (shown["leo"], shown["hw"]) == (str(expected["log_end_offset"]), str(expected["high_watermark"])), \
            f"the page shows {shown}, `kshim ctl status` {expected}"

        # abnormal states in colour: paused (the process), fenced (registered), isolated
        assert cell_color(page, follower, "process") != cell_color(page, leader, "process")
        page.wait_for_selector(f'tr[data-broker="{follower}"][data-alive="false"]')  # the session timeout
        assert cell_color(page, follower, "registered") != cell_color(page, leader, "registered")
        page.click(f'button[data-action="isolate"][data-node="{other}"]')
        page.wait_for_selector(f'tr[data-broker="{other}"][data-isolated="true"]')
        assert cell_color(page, other, "isolated") != cell_color(page, leader, "isolated")
        assert cell_color(page, other, "isolated") == cell_color(page, follower, "process")

        # the fault form's error field shows the default name, and the longest, whole
        def error_field_fits(value: str) -> bool:
            page.fill("#f-error", value)
            return page.evaluate("(() => { const i = document.getElementById('f-error'); "
                                 "return i.scrollWidth <= i.clientWidth; })()")
        longest = max((e.name for e in ErrorCode), key=len)
        assert error_field_fits("NOT_LEADER_OR_FOLLOWER") and error_field_fits(longest), longest
        page.close()


# ------------------------------------------------------------------------------------ /metrics
def test_metrics_scraped_and_parsed_on_a_single_broker(tmp_path):
    process = KshimProcess(tmp_path / "data").start()
    try:
        url = console_url(process)
        produce(process.bootstrap, "metered", 25, "all")
        consume_and_commit(process.bootstrap, "metered", "meter-readers", 25)

        def scraped():
            m = scrape(url)
            groups = sum(v for (name, labels), v in m.items()
                         if name == "kafka_coordinator_group_groupmetadatamanager_numgroups")
            return m if groups >= 1 else None

        metrics = wait_until(scraped, timeout=20, message="the group counted in /metrics")
        broker = {"broker": "0"}
        assert sample(metrics, "kafka_network_requestmetrics_requests_total", request="Produce", **broker) >= 1
        assert sample(metrics, "kafka_network_requestmetrics_requests_total", request="Fetch", **broker) >= 1
        assert sample(metrics, "kafka_network_requestmetrics_totaltimems_count", request="Produce", **broker) >= 1
        assert sample(metrics, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered", **broker) >= 25 * 100
        assert sample(metrics, "kafka_server_brokertopicmetrics_bytesout_total", topic="metered", **broker) >= 25 * 100
        assert sample(metrics, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered", **broker) == 25
        for name in ("kafka_log_log_logendoffset", "kshim_partition_high_watermark",
                     "kshim_partition_last_stable_offset"):
            assert sample(metrics, name, topic="metered", partition="0", **broker) == 25, name
        assert sample(metrics, "kafka_log_log_logstartoffset", topic="metered", partition="0", **broker) == 0
        assert sample(metrics, "kafka_server_replicamanager_underreplicatedpartitions", **broker) == 0
        assert sample(metrics, "kafka_controller_kafkacontroller_activebrokercount") == 1
        assert sample(metrics, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

        # an open transaction: on the page's state, its records COMMITTED above the last stable offset
        producer = Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "console-txn",
                             "log_level": 3})
        producer.init_transactions(20)
        producer.begin_transaction()
        producer.produce("metered", b"pending", partition=0)
        assert producer.flush(20) == 0

        def open_txn():
            status, text = get(url + "state")
            assert status == 200
            s = json.loads(text)
            return s if [t["state"] for t in s["transactions"] if t["transactional_id"] == "console-txn"] \
                == ["Ongoing"] else None

        state = wait_until(open_txn, timeout=30, message="the open transaction on the console")
        assert state["mode"] == "single"
        [p] = [p for p in state["partitions"] if p["topic"] == "metered"]
        r = p["replica_states"][0]
        assert (r["last_stable_offset"], r["high_watermark"], r["log_end_offset"]) == (25, 26, 26)
        metrics = scrape(url)
        assert sample(metrics, "kshim_transaction_coordinator_transactions", state="Ongoing", **broker) == 1
        assert sample(metrics, "kshim_partition_last_stable_offset", topic="metered", partition="0", **broker) == 25
        producer.abort_transaction(20)
        assert get(url + "nothing-here")[0] == 404
        assert post(url + "action", b"action=kill&node=0", "application/x-www-form-urlencoded")[0] == 415
        status, answer = post(url + "action", b'{"action": "kill", "node": 0}', "application/json")
        assert status == 400 and not answer["ok"]  # a single broker offers no node actions
    finally:
        assert process.terminate() == 0


def test_page_shows_the_schema_registrys_subjects_and_versions(tmp_path, browser):
    process = KshimProcess(tmp_path / "data", "--schema-registry", "--schema-registry-port", "0").start()
    try:
        registry = process.ready_line.split("; schema registry ", 1)[1].split()[0]
        page = Page(browser, console_url(process))
        page.wait_for_selector("#schemas-section p.muted")  # the section, with no subjects yet
        for fields in ([{"name": "a", "type": "int"}], [{"name": "a", "type": "int"}, {"name": "b", "type": "int",
                                                                                     "default": 0}]):
            schema = json.dumps({"type": "record", "name": "Shown", "fields": fields})
            status, _ = post(f"{registry}subjects/shown-value/versions", json.dumps({"schema": schema}).encode(),
                             "application/vnd.schemaregistry.v1+json")
            assert status == 200
        page.wait_for_selector('tr[data-subject="shown-value"] [data-version="2"]')
        assert "v1 (id 1, AVRO)" in page.inner_text('tr[data-subject="shown-value"]')
    finally:
        assert process.terminate() == 0


def test_no_console_option(tmp_path):
    process = KshimProcess(tmp_path / "data", "--no-console").start()
    try:
        ready = next(line for line in process.output if line.startswith("kshim ready:"))
        assert "console http" not in ready
    finally:
        assert process.terminate() == 0



def test_fault_rules_added_listed_and_cleared_from_the_console(tmp_path):
    """The console's fault-rule buttons post these: a rule added there fails a real client's request
    with the error it names, shows on the page's state with its counters, and goes when cleared."""
    process = KshimProcess(tmp_path / "data").start()
    try:
        url = console_url(process)
        produce(process.bootstrap, "faulty", 1, "all")  # the topic exists and its leader is known
        status, answer = post(url + "action", json.dumps({"action": "fault-add", "node": None, "rule": {
            "action": "error", "api": "Produce", "topic": "faulty", "error": "INVALID_REQUIRED_ACKS",
            "count": 1}}).encode(), "application/json")
        assert status == 200 and answer["ok"], answer
        [rule] = json.loads(get(url + "state")[1])["faults"]
        assert (rule["action"], rule["api"], rule["topic"], rule["error"], rule["applied"]) == \
            ("error", "Produce", "faulty", "INVALID_REQUIRED_ACKS", 0)
        producer = KafkaProducer(bootstrap_servers=process.bootstrap, acks="all", retries=0)
        try:
            with pytest.raises(Exception, match="InvalidRequiredAcks|INVALID_REQUIRED_ACKS"):
                producer.send("faulty", b"refused", partition=0).get(timeout=20)
        finally:
            producer.close(timeout=5)
        # count 1: applied once, the rule is gone by itself
        wait_until(lambda: json.loads(get(url + "state")[1])["faults"] == [], timeout=10,
                   message="the rule spent after one use")
        post(url + "action", json.dumps({"action": "fault-add", "node": None, "rule": {
            "action": "delay", "api": "Fetch", "delay_ms": 50}}).encode(), "application/json")
        [rule] = json.loads(get(url + "state")[1])["faults"]
        status, answer = post(url + "action", json.dumps({"action": "fault-clear", "id": rule["id"],
                                                          "node": rule["node"]}).encode(), "application/json")
        assert status == 200 and answer["ok"] and json.loads(get(url + "state")[1])["faults"] == []
        status, answer = post(url + "action", json.dumps({"action": "fault-add", "node": None, "rule": {
            "action": "error", "error": "NO_SUCH_ERROR"}}).encode(), "application/json")
        assert status == 409 and not answer["ok"]  # refused with the rule's problem, nothing added
        produce(process.bootstrap, "faulty", 1, "all")  # and the broker serves as before
    finally:
        assert process.terminate() == 0
