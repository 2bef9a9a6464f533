"""The nemesis soak (compat_tests/nemesis.py), short: about 45 s of faults of every kind (broker
SIGKILLs, pauses, isolations, controller SIGKILLs, SIGKILLs of the whole process tree and a start
again on the same data dir) on `kshim serve --brokers 3` under an idempotent acks=all producer;
every acknowledged record is read back once, in order, at its offset, and every fault heals.
`python -m compat_tests.nemesis --seconds 420` is the long run."""
from __future__ import annotations

from compat_tests import nemesis


def test_faults_of_every_kind_lose_duplicate_and_reorder_nothing_acknowledged():
    report = nemesis.run(45, seed=11, rate=500)
    print(report.summary())
    assert set(report.faults) == set(nemesis.KINDS), report.faults
    assert report.unhealed == 0, report.failures
    assert report.acked > 45 * 500 // 4, report.summary()
    assert (report.lost, report.duplicated, report.reordered, report.no_offset) == (0, 0, 0, 0), \
        (report.summary(), report.failures)


def test_the_check_counts_lost_duplicated_and_reordered_records():
    acked = [(0, 0, 10), (0, 1, 11), (0, 2, 12), (1, 0, 20), (1, 1, 21)]
    clean = nemesis.Report(1, 1, 1)
    nemesis.check(clean, acked, {0: [(0, 10), (1, 11), (2, 12)], 1: [(0, 20), (1, 21)], 2: []})
    assert (clean.lost, clean.duplicated, clean.reordered) == (0, 0, 0)
    bad = nemesis.Report(1, 1, 1)
    # 12 lost, 20 read twice, 21 read at another offset than acknowledged
    nemesis.check(bad, acked, {0: [(0, 10), (1, 11)], 1: [(0, 20), (1, 20), (2, 21)], 2: []})
    assert (bad.lost, bad.duplicated, bad.reordered) == (1, 1, 1)
