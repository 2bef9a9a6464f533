"""The crash campaign (compat_tests/crash_campaign.py), short: one round of every fault kind
(SIGKILL of the whole tree, of a broker, of the controller, again during the restart's recovery,
during a clean stop, compaction, topic deletion, a segment roll and a log-dir move; a single
`kshim serve` and `kshim serve --ephemeral` SIGKILLed) under an idempotent acks=all and a plain
acks=1 producer, after a consumer group committed; every partition read back from the beginning
with both isolation levels. `python -m compat_tests.crash_campaign --rounds 60` is the long run."""
from __future__ import annotations

from compat_tests import crash_campaign as cc
from compat_tests.crash_campaign import Ack, check, resent_after_a_bump
from wire import records


def test_every_kind_of_crash_loses_nothing_acknowledged():
    report = cc.run(len(cc.KINDS), seed=5, rate=300)
    print(report.summary())
    for line in report.failures:
        print("  " + line[:2000])
    assert set(report.faults) == set(cc.KINDS), report.faults
    assert len(report.rounds) == len(cc.KINDS), report.failures
    assert (report.unhealed, report.problems) == (0, 0), report.failures
    assert report.acked_idempotent > 1000 and report.acked_plain > 1000, report.summary()
    # a restarted broker's own data was checked where it was restarted alone (fetches from it held)
    alone = [r for r in report.rounds if r.kind in ("kill-broker", "single-kill")]
    assert all(r.held_on_broker > 0 for r in alone), [(r.kind, r.held_on_broker) for r in alone]
    assert (report.lost, report.moved, report.duplicated, report.gaps, report.not_on_broker) == (0, 0, 0, 0, 0), \
        (report.summary(), report.failures)


def ack(partition: int, offset: int, value: bytes, idempotent: bool = True, key: bytes | None = None,
        may_lose: bool = False, topic: str = "t") -> Ack:
    return Ack(topic, partition, offset, value, key, idempotent, 1, may_lose=may_lose)


def test_the_check_counts_lost_moved_duplicated_records_and_gaps():
    acked = [ack(0, 0, b"i.1.0."), ack(0, 1, b"i.1.1."), ack(0, 2, b"i.1.2."), ack(0, 3, b"p.1.3.", idempotent=False),
             ack(1, 0, b"i.1.4."), ack(1, 1, b"p.1.5.", idempotent=False, may_lose=True)]
    clean = check(acked, {("t", 0): [(0, None, b"i.1.0."), (1, None, b"i.1.1."), (2, None, b"i.1.2."),
                                     (3, None, b"p.1.3.")],
                          ("t", 1): [(0, None, b"i.1.4."), (1, None, b"p.1.5.")]})
    assert (clean.missing, clean.moved, clean.duplicated, clean.gaps, clean.uncommitted_lost) == (set(),) * 5
    # i.1.1 lost, i.1.2 read at 4 (moved, and offsets 1..3 never read: gaps), i.1.0 read twice,
    # p.1.3 (acks=1) read twice: allowed, counted apart; p.1.5 (UNCOMMITTED at a failover) lost: apart
    bad = check(acked, {("t", 0): [(0, None, b"i.1.0."), (4, None, b"i.1.2."), (5, None, b"i.1.0."),
                                   (6, None, b"p.1.3."), (7, None, b"p.1.3.")],
                        ("t", 1): [(0, None, b"i.1.4.")]})
    assert bad.missing == {("t", 0, 1)}
    assert bad.moved == {("t", 0, 2), ("t", 0, 3)}
    assert bad.duplicated == {b"i.1.0."}
    assert bad.gaps == {("t", 0, 1), ("t", 0, 2), ("t", 0, 3)}
    assert bad.plain_duplicates == {b"p.1.3."}
    assert bad.uncommitted_lost == {("t", 1, 1)}


def test_in_a_compacted_topic_only_a_keys_latest_record_must_stay():
    acked = [ack(0, 0, b"i.1.0.", key=b"a", topic="c"), ack(0, 1, b"i.1.1.", key=b"b", topic="c"),
             ack(0, 2, b"i.1.2.", key=b"a", topic="c"), ack(0, 3, b"i.1.3.", key=b"b", topic="c")]
    cleaned = check(acked, {("c", 0): [(2, b"a", b"i.1.2."), (3, b"b", b"i.1.3.")]}, compacted=["c"])
    assert (cleaned.missing, cleaned.gaps) == (set(), set())  # holes of the cleaning are no gaps
    lost_latest = check(acked, {("c", 0): [(2, b"a", b"i.1.2.")]}, compacted=["c"])
    assert lost_latest.missing == {("c", 0, 1), ("c", 0, 3)}  # b's records: none read at all


def test_ranges_say_which_offsets():
    assert cc.ranges([7, 1, 2, 3, 9, 10]) == "1..3, 7, 9..10"
    assert cc.by_partition([("t", 0, 5), ("t", 0, 6), ("u", 1, 0)]) == "t/0 offsets 5..6 (2); u/1 offsets 0 (1)"


def test_a_value_read_twice_is_a_resend_only_when_its_copies_have_two_producer_epochs(tmp_path):
    """librdkafka re-sends a record of unknown outcome under its bumped epoch: two batches the
    broker cannot tell apart from new ones. One epoch for both copies is the broker's duplicate."""
    def log(name: str, epochs: tuple[int, int]) -> None:
        replica = tmp_path / "logs-a" / "broker-0" / name
        replica.mkdir(parents=True)
        batches = [records.encode_batch([(None, b"i.1.7.")], base_offset=at, producer_id=7000, producer_epoch=e,
                                        base_sequence=0) for at, e in zip((3, 9), epochs)]
        filler = records.encode_batch([(None, b"p.1.8.")] * 5, base_offset=4)
        (replica / "00000000000000000000.log").write_bytes(batches[0] + filler + batches[1])

    log("t-0", (0, 1))
    log("t-1", (0, 0))
    read = [(3, None, b"i.1.7."), (9, None, b"i.1.7.")]
    dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
    assert resent_after_a_bump(b"i.1.7.", {("t", 0): read}, dirs)
    assert not resent_after_a_bump(b"i.1.7.", {("t", 1): read}, dirs)
    assert not resent_after_a_bump(b"i.1.7.", {("t", 2): read}, dirs)  # no log to look at: a duplicate
