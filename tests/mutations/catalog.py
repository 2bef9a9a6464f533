"""One deliberate bug per rule: a text patch of the kshim source that breaks exactly that rule.
`python -m tests.mutations.run` applies each to a copy of the tree and runs the tests that claim
the rule; a rule whose tests still pass (or fail by anything but a failed check) is not proved.

Two kinds of rows:
- the rules of docs/consistency.md: `row` is a phrase found in exactly one rule cell there and
  `tests` is empty; the tests to run are read from that row, so the document and the proof
  cannot drift apart (every row of the document has exactly one mutation);
- the rules of other areas (security, compaction, share groups, fault rules, topic configs,
  quotas, fetch sessions, connection limits): `row` states the rule itself and `tests` names the
  tests that must catch its mutation.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    row: str                            # a phrase unique to the rule's cell in docs/consistency.md,
                                        # or (with `tests`) the rule itself
    path: str                           # file under the project root
    hunks: tuple[tuple[str, str], ...]  # (old, new): each old text occurs exactly once in the file
    breaks: str                         # what the patched broker does wrong
    tests: tuple[str, ...] = ()         # the tests that must catch it; empty: those the document's row names
    area: str = "consistency"           # the group of rules it belongs to (`run --area`)
    # (path, hunks) of more files to patch, for a bug that spans modules
    more: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def patches(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """(path, hunks) of every file the bug patches, `path` first."""
        return ((self.path, self.hunks), *self.more)


PARTITION, PRODUCE = "kshim/replica/partition.py", "kshim/net/handlers/00_produce.py"
PARTITION_APPENDS, PARTITION_CHECKS = "kshim/replica/partition_appends.py", "kshim/replica/partition_checks.py"
PARTITION_TXNS = "kshim/replica/partition_txns.py"
REPLICAS, FETCH = "kshim/replica/manager.py", "kshim/replica/fetch.py"
APPENDS, RECOVERY = "kshim/replica/appends.py", "kshim/replica/recovery.py"
TXN_COORDINATOR = "kshim/coordinator/transactions/coordinator.py"
CLEANER, SHARE_STATE = "kshim/log/cleaner.py", "kshim/coordinator/share_partitions/state.py"

MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------------ producers
    Mutation("`acks=0` gets no response", PRODUCE, (
        ("            raise ProtocolError(f\"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata\")\n        return None",
         "            raise ProtocolError(f\"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata\")\n        return {\"responses\": responses, \"throttle_time_ms\": 0}"),),
        "acks=0 requests get a response"),
    Mutation("`acks=1` answers once the leader has appended", APPENDS, (
        ("        appended = partition.submit_append(data)\n",
         "        appended = partition.submit_append(data) if acks != 1 else AppendResult(\n"
         "            base_offset=partition.log_end_offset, last_offset=partition.log_end_offset)\n"),),
        "acks=1 answers without appending"),
    Mutation("`acks=all` answers only once the records are COMMITTED", PARTITION_APPENDS, (
        ("        if result.appended_batches:\n            self._advance_hw()\n            self.wake_all()\n        return result",
         "        if result.appended_batches:\n            self.wake_all()\n        return result"),),
        "on one broker records become COMMITTED only at the next housekeeping run (up to 1 s later)",
        more=((PARTITION, (("        self.log.maybe_flush(now)  # the high watermark",
                            "        self._advance_hw()\n        self.log.maybe_flush(now)  # the high watermark"),)),)),
    Mutation("offsets are unique and increasing", PRODUCE, (
        ("\"base_offset\": result.base_offset if result.error == ErrorCode.NONE else -1,",
         "\"base_offset\": result.last_offset if result.error == ErrorCode.NONE else -1,"),),
        "the producer is told the batch's last offset as its base: not where its records are"),
    Mutation("no atomicity across a request", PARTITION_APPENDS, (
        # a small request is appended on the event loop, batch by batch (Partition.append)
        ("        pos, end = 0, len(buf)\n        now = SYSTEM.wall_ms()\n",
         "        pos, end = 0, len(buf)\n        now = SYSTEM.wall_ms()\n        start = self.log.log_end_offset\n"),
        ("            if header is None:\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            try:",
         "            if header is None:\n                self.log.truncate_to(start)\n"
         "                result.appended_batches = 0\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            try:")),
        "an invalid batch rolls back the batches of the request appended before it"),
    Mutation("each partition of a request succeeds or fails on its own", APPENDS, (
        ("        return self._await_commit(results, waits, timeout_s) if waits else results\n",
         "        first = next((r.error for r in results if r.error), ErrorCode.NONE)\n"
         "        for r in results:\n            r.error = first\n"
         "        return self._await_commit(results, waits, timeout_s) if waits else results\n"),),
        "one failed partition fails every partition of the request"),
    Mutation("an idempotent producer's retried batch", PARTITION_CHECKS, (
        ("            if check.is_duplicate:", "            if False and check.is_duplicate:"),),
        "a retried idempotent batch is appended again"),
    Mutation("`flush.messages` opts into fsync", "kshim/configs/resolver.py", (
        ("flush_messages=None if flush_messages == LONG_MAX else flush_messages,", "flush_messages=None,"),),
        "the topic's flush.messages never reaches the log"),
    # ------------------------------------------------------------------ consumers
    Mutation("`read_committed` sees only COMMITTED records", PARTITION_TXNS, (
        ("        lso = self._high_watermark\n        if self.dormant is not None:",
         "        lso = self.log.log_end_offset\n        if self.dormant is not None:"),),
        "read_committed reads up to the log end, past the high watermark"),
    Mutation("an open transaction holds it at the transaction's first offset", PARTITION_TXNS, (
        ("        if self.producers.ongoing:\n", "        if False:\n"),),
        "open transactions do not hold the last stable offset"),
    Mutation("`read_committed` never sees records of aborted transactions", FETCH, (
        ("result.aborted_transactions = partition.log.aborted_between(p.fetch_offset, _end_of(data))",
         "result.aborted_transactions = []"),),
        "read_committed fetches do not name the aborted transactions"),
    Mutation("`read_uncommitted` may also see UNCOMMITTED records", PARTITION, (
        ("        if isolation_level == 1:\n            return self.last_stable_offset",
         "        if True:\n            return self.last_stable_offset"),),
        "read_uncommitted is bounded like read_committed"),
    Mutation("ListOffsets latest and the Fetch watermarks follow the same bound", FETCH, (
        ("result.last_stable_offset = partition.last_stable_offset",
         "result.last_stable_offset = partition.high_watermark"),),
        "Fetch reports the high watermark as its last stable offset"),
    # ------------------------------------------------------------------ with followers
    Mutation("acks=1 records are UNCOMMITTED until the in-sync followers have them", "kshim/net/handlers/02_list_offsets.py", (
        ("        return partition.read_bound(isolation_level), -1", "        return partition.read_bound(0), -1"),),
        "ListOffsets latest answers the log end offset under read_committed"),
    Mutation("acks=all with in-sync followers that do not fetch", APPENDS, (
        ("        result.error, result.message = ErrorCode.REQUEST_TIMED_OUT, (",
         "        result.error, result.message = ErrorCode.NONE, ("),),
        "acks=all answers success at the timeout though the records are not COMMITTED"),
    Mutation("acks=all when the ISR is smaller than `min.insync.replicas`", APPENDS, (
        ("        if acks == -1 and len(partition.isr) < partition.min_insync_replicas:",
         "        if acks == -1 and len(partition.isr) < partition.min_insync_replicas and partition.append(data):"),),
        "NOT_ENOUGH_REPLICAS after appending the records"),
    Mutation("NOT_ENOUGH_REPLICAS_AFTER_APPEND", APPENDS, (
        ("    if len(partition.isr) < partition.min_insync_replicas:\n        result.error, result.message = "
         "ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND",
         "    if False:\n        result.error, result.message = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND"),),
        "acks=all answers success though the ISR fell below min.insync.replicas while it waited"),
    Mutation("`kshim.commit.quorum=majority` commits", PARTITION, (
        ("        if self.majority_quorum:\n            ends", "        if False:\n            ends"),),
        "the majority commit quorum waits for the whole ISR"),
    Mutation("`kshim.uncommitted.read.limit=high-watermark` bounds", PARTITION, (
        ("return self._high_watermark if self.uncommitted_reads_to_hw else self.log_end_offset",
         "return self.log_end_offset"),),
        "read_uncommitted reads to the log end whatever the topic says"),
    Mutation("a leader crash never loses a COMMITTED record", PARTITION_APPENDS, (
        ("        if self.log.truncate_to(offset):\n            # what a follower cuts",
         "        if False:\n            # what a follower cuts"),),
        "a returning former leader keeps its divergent suffix"),
    Mutation("an idempotent acks=all producer across repeated leader crashes", PARTITION_APPENDS, (
        ("            if header.producer_id >= 0:\n                self._track(self.producers, header, memoryview(data)",
         "            if False:\n                self._track(self.producers, header, memoryview(data)"),),
        "followers do not replicate producer state: a new leader takes retries for new batches"),
    Mutation("leaders are elected from the ISR only", "kshim/controller/elections.py", (
        ("        in_sync = [r for r in p.replicas if r in p.isr and r in alive]",
         "        in_sync = [r for r in p.replicas if r in alive]"),),
        "any alive replica may be elected leader"),
    Mutation("an admin's preferred leader election", "kshim/controller/elections.py", (
        ("            if preferred not in p.isr or preferred not in alive or not self._holds_the_leaders_log(topic, p, preferred):",
         "            if preferred not in alive:"),),
        "a preferred election hands leadership to an out-of-sync replica"),
    Mutation("a partition reassignment completes only once every target replica is in the ISR",
             "kshim/cluster/image.py", (
        ("    return bool(adding or removing) and all(r in isr for r in replicas if r not in removing)",
         "    return bool(adding or removing)"),),
        "a reassignment drops the old replicas before the new ones caught up"),
    Mutation("a leader that a reassignment removes takes no appends", PARTITION_CHECKS, (
        ("        if self.handing_over:\n            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, HANDING_OVER",
         "        if False:\n            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, HANDING_OVER"),),
        "a leader handing over keeps taking appends the target never fetches: acks=1 records are lost with it"),
    # ------------------------------------------------------------------ crashes and restarts
    Mutation("at any moment loses no acknowledged record", "kshim/log/segment.py", (
        ("        self.rebuild(validate=True)\n        self.open_index_files()\n        self._init_first_append()\n        return False",
         "        os.ftruncate(self.fd, 0)\n        self.size = 0\n        self.rebuild(validate=True)\n"
         "        self.open_index_files()\n        self._init_first_append()\n        return False"),),
        "recovery after a crash drops the active segment's records"),
    Mutation("is recovered, never deleted, while the broker's first image", RECOVERY, (
        ("            out.append((key, topic, topic.partitions[key[1]], self.recovering[key]))\n        return out",
         "            out.append((key, topic, topic.partitions[key[1]], self.recovering[key]))\n"
         "        if not out:\n            self.cancel(next(iter(self.recovering)))\n        return out"),),
        "the background recovery gives up (deletes) the logs the image being prepared assigns"),
    Mutation("halfway through a write) of a segment roll", "kshim/log/retention.py", (
        ("            for seg in reversed(self._segments[i + 1:]):\n                seg.delete()",
         "            for seg in self._segments[i + 1:]:\n                seg.delete()"),),
        "a truncation deletes the later segments oldest first: a kill part way leaves a hole read as data"),
    Mutation("metadata of another cluster", REPLICAS, (
        ("            check_cluster(self.log_dirs, image.cluster_id, self.node_id)\n", ""),),
        "an image of another cluster id is applied, setting all the data aside"),
    Mutation("a starting cluster broker answers no client before", "kshim/cluster/broker_process.py", (
        ("                await tg.start(client.run, config.advertised, port, os.getpid())\n"
         "                await tg.start(Server(node, faults, requests).serve, listeners)\n",
         "                await tg.start(Server(node, faults, requests).serve, listeners)\n"
         "                tg.start_soon(client.run, config.advertised, port, os.getpid())\n"),),
        "the broker serves with the empty image of its start until it registers"),
    Mutation("keeps nothing across a crash, by design", "kshim/cli.py", (
        ("            for left, size in abandoned_dirs():", "            for left, size in []:"),),
        "a restart after a crash says nothing and leaves the killed broker's data on tmpfs"),
    # ------------------------------------------------------------------ transactions
    Mutation("become visible to read_committed all at once when it commits", "kshim/coordinator/groups/coordinator.py", (
        ("        if not committed or index not in self.loaded:\n            return",
         "        if True:\n            return"),),
        "offsets sent with a transaction never take effect when it commits"),
    Mutation("a new instance with the same transactional.id fences the old one", TXN_COORDINATOR, (
        ("        if meta.state == TxnState.ONGOING:\n            # a previous instance",
         "        if False:\n            # a previous instance"),),
        "a new instance leaves the old one's transaction open"),
    Mutation("a transaction open longer than transaction.timeout.ms", TXN_COORDINATOR, (
        ("tg.start_soon(self._begin_end, meta, False, True)",
         "tg.start_soon(self._begin_end, meta, False, False)"),),
        "the timeout aborts the transaction without bumping the producer epoch (no fencing)"),
    Mutation("a SIGKILLed transaction coordinator or partition leader mid-transaction", TXN_COORDINATOR, (
        ("            if meta is not None:\n                self.txns[tid] = meta",
         "            if meta is not None and meta.state != TxnState.ONGOING:\n                self.txns[tid] = meta"),),
        "a new transaction coordinator forgets the open transactions it loads"),
    Mutation("exactly once: 100,000 records copied", TXN_COORDINATOR, (
        ("                if meta.state.preparing:\n                    self._to_complete.append(tid)",
         "                if False:\n                    self._to_complete.append(tid)"),),
        "a new transaction coordinator never finishes the commits and aborts it finds half-written"),
    Mutation("exactly once with the Java client", "kshim/coordinator/groups/coordinator.py", (
        ("                    if marker is not None and marker.committed:\n                        self._apply_record",
         "                    if False:\n                        self._apply_record"),),
        "a new group coordinator forgets offsets committed in transactions"),
    # ================================================================== beyond docs/consistency.md
    # each names the tests that must catch it (`tests`) instead of a row of the document
    # ------------------------------------------------------------------ producers (the log writer's path)
    Mutation("no atomicity across a request, also for a request written through the log writer", PARTITION_APPENDS, (
        # a large request, or one behind another write of its partition: Partition._append_in_turn
        ("        result.log_append_time = append_time\n        pos, end = 0, len(buf)\n",
         "        result.log_append_time = append_time\n        pos, end = 0, len(buf)\n"
         "        start = self.log.log_end_offset\n"),
        ("            if header is None:\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            job = ",
         "            if header is None:\n                self.log.truncate_to(start)\n"
         "                result.appended_batches = 0\n                break\n            if header is _DUPLICATE:\n"
         "                pos += result.skipped\n                continue\n            job = ")),
        "an invalid batch rolls back the batches of the request the log writer wrote before it",
        tests=("tests/test_log_writer.py::test_a_bad_batch_keeps_the_batches_written_before_it_and_drops_the_rest",),
        area="producers"),
    # ------------------------------------------------------------------ security
    Mutation("a DENY ACL wins over any ALLOW that matches the same principal and operation", "kshim/security/acls.py", (
        ("            if acl.permission == Permission.DENY:\n                return False\n            allow = True",
         "            if acl.permission == Permission.DENY:\n                continue\n            allow = True"),),
        "DENY ACLs are ignored: an ALLOW lets the denied principal through",
        tests=("tests/test_acls.py::test_deny_wins_over_allow_whatever_pattern_gives_it",
               "compat_tests/test_acls.py::test_topic_deny_fails_produce_and_consume_and_hides_the_topic",
               "compat_tests/test_acls.py::test_group_deny_gives_group_authorization_failed"),
        area="security"),
    Mutation("an ALLOW ACL allows only the principal it names", "kshim/security/acls.py", (
        ("            if not principal_matches(acl, principal) or acl.host not in (host, WILDCARD):",
         "            if acl.host not in (host, WILDCARD):"),),
        "an ACL applies to every principal: alice's ALLOW lets bob in",
        tests=("tests/test_authorization.py::test_produce_and_fetch_per_principal",
               "compat_tests/test_acls_sasl.py::test_an_acl_allows_one_principal_and_denies_another"),
        area="security"),
    Mutation("SCRAM authenticates only a client whose proof comes from the user's password", "kshim/security/sasl.py", (
        ("        if not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), self._cred.stored_key):",
         "        if False and not hmac.compare_digest(hashlib.new(self.algo, client_key).digest(), self._cred.stored_key):"),),
        "SCRAM accepts any client proof: a wrong password authenticates",
        tests=("tests/test_security.py::test_scram_fails_on_a_wrong_password_or_unknown_user",
               "compat_tests/test_security.py::test_wrong_password_fails_and_is_delayed"),
        area="security"),
    Mutation("with connections.max.reauth.ms a SASL session ends, and clients re-authenticate on the same connection",
             "kshim/security/session.py", (
        ("        if self.config.max_reauth_ms > 0:\n            lifetime_ms = self.config.max_reauth_ms",
         "        if False:\n            lifetime_ms = self.config.max_reauth_ms"),),
        "re-authentication is off: sessions never end, no client re-authenticates",
        tests=("tests/test_security.py::test_reauthentication_within_the_session_lifetime",
               "compat_tests/test_security.py::test_clients_reauthenticate_before_their_session_ends"),
        area="security"),
    Mutation("an SSL listener requests the client's certificate, verifies it and makes its subject the principal",
             "kshim/security/tls.py", (
        ('ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL',
         'ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_NONE'),),
        "--tls-client-auth requested never asks for a certificate: mTLS clients stay User:ANONYMOUS",
        tests=("compat_tests/test_security.py::test_confluent_ssl_with_client_certificate",),
        area="security"),
    Mutation("the broker-wide ssl.client.auth applies to SSL listeners only; a SASL_SSL listener asks for client "
             "certificates only by its own listener.name.<l>.ssl.client.auth (KIP-684)", "kshim/security/config.py", (
        ('return self.tls_client_auth if listener.protocol == "SSL" else "none"', 'return self.tls_client_auth'),),
        "--tls-client-auth required refuses SASL_SSL clients that authenticate with a password and no certificate",
        tests=("tests/test_listener_security.py::test_broker_wide_client_auth_applies_to_ssl_listeners_only",
               "compat_tests/test_listener_security.py::"
               "test_broker_wide_client_auth_requires_certificates_on_ssl_listeners_only"),
        area="security"),
    Mutation("a listener's own listener.name.<l>.ssl.client.auth makes it ask for client certificates",
             "kshim/security/config.py", (
        ('own = self.own(listener, "ssl.client.auth")', 'own = None'),),
        "listener.name.<l>.ssl.client.auth is ignored: a SASL_SSL client with a password and no certificate gets in",
        tests=("tests/test_listener_security.py::test_broker_wide_client_auth_applies_to_ssl_listeners_only",
               "compat_tests/test_listener_security.py::"
               "test_a_sasl_ssl_listener_requires_certificates_by_its_own_client_auth"),
        area="security"),
    Mutation("the SASL handshake on a listener offers and accepts only that listener's sasl.enabled.mechanisms",
             "kshim/security/session.py", (
        ("        enabled = self.mechanisms\n", "        enabled = self.config.sasl_mechanisms\n"),),
        "listener.name.<l>.sasl.enabled.mechanisms is ignored: PLAIN is accepted where only SCRAM is enabled",
        tests=("tests/test_listener_security.py::test_sasl_mechanisms_per_listener",
               "compat_tests/test_listener_security.py::test_sasl_mechanisms_are_per_listener"),
        area="security"),
    Mutation("each TLS listener presents its own certificate (its own context)", "kshim/net/server.py", (
        ("tls = self.tls[listener.name].wrap_socket", "tls = next(iter(self.tls.values())).wrap_socket"),),
        "every TLS listener presents the first one's certificate and asks for certificates as it does",
        tests=("compat_tests/test_listener_security.py::test_listeners_present_their_own_certificates",),
        area="security"),
    # ------------------------------------------------------------------ compaction
    Mutation("the cleaner cleans only below the last stable offset: an open transaction's records shadow nothing",
             "kshim/replica/cleaning.py", (
        ("    return _Candidate(p, p.last_stable_offset,", "    return _Candidate(p, p.log_end_offset,"),),
        "the broker's cleaner is bounded by the log end: an open transaction's record deletes a committed value",
        tests=("tests/test_cleaner.py::test_the_brokers_cleaner_stops_at_an_open_transaction",),
        area="compaction"),
    Mutation("compaction keeps the latest record of every key", CLEANER, (
        ("        self.entries[key] = offset\n", "        self.entries.setdefault(key, offset)\n"),),
        "the cleaner keeps each key's first record of the dirty range, not its latest",
        tests=("tests/test_cleaner.py::test_keeps_the_latest_record_of_every_key_below_the_active_segment_with_offsets_unchanged",),
        area="compaction"),
    Mutation("a tombstone goes delete.retention.ms after its first clean", CLEANER, (
        ("    retain_deletes = not h.has_delete_horizon or now_ms < h.base_timestamp",
         "    retain_deletes = True"),),
        "tombstones are never removed",
        tests=("tests/test_cleaner.py::test_tombstones_go_delete_retention_ms_after_their_first_clean",),
        area="compaction"),
    Mutation("compaction removes the records of aborted transactions", CLEANER, (
        ("        discardable = discard_records = txns.on_batch(h)  # a batch of an aborted transaction",
         "        discardable = discard_records = txns.on_batch(h) and False"),),
        "the cleaner keeps the records of aborted transactions",
        tests=("tests/test_cleaner.py::test_committed_transactional_records_compact_like_others_and_aborted_ones_go",),
        area="compaction"),
    Mutation("DeleteRecords on a compact-only topic is POLICY_VIOLATION", PARTITION, (
        ("        if self.log_config.compact and not self.log_config.delete:  # Kafka's words\n",
         "        if False:  # Kafka's words\n"),),
        "DeleteRecords moves the log start of a topic whose cleanup.policy is compact alone",
        tests=("tests/test_admin_handlers.py::test_delete_records_of_a_compact_only_topic_is_a_policy_violation",),
        area="compaction"),
    # ------------------------------------------------------------------ share groups
    Mutation("a share group's record lock expires after group.share.record.lock.duration.ms", SHARE_STATE, (
        ("            if rec.state == RecordState.ACQUIRED and rec.deadline_ms <= now_ms:",
         "            if rec.state == RecordState.ACQUIRED and rec.deadline_ms < 0:"),),
        "record locks never expire: a consumer that stops holds its records for ever",
        tests=("tests/test_share_state.py::test_lock_expiry_on_a_manual_clock_releases_to_another_member",),
        area="share groups"),
    Mutation("each delivery of a share group's record counts, and the delivery limit archives it", SHARE_STATE, (
        ("            rec.delivery_count += 1\n", ""),),
        "a redelivered record keeps delivery count 1: the delivery limit never archives it",
        tests=("tests/test_share_state.py::test_accept_moves_start_release_redelivers_with_count_two",
               "tests/test_share_state.py::test_delivery_limit_archives_on_the_last_release"),
        area="share groups"),
    Mutation("a share partition holds at most group.share.partition.max.record.locks records in flight", SHARE_STATE, (
        ("            n = 0 if self.end - self.start >= limits.max_locks else max(1, self.start + limits.max_locks - offset)",
         "            n = last + 1 - offset"),),
        "max.record.locks is ignored for the records of a batch: the window grows past it",
        tests=("tests/test_share_state.py::test_max_locks_bounds_the_window",),
        area="share groups"),
    # ------------------------------------------------------------------ fault rules
    Mutation("a timeout fault rule applies the request and withholds only its answer", "kshim/net/server.py", (
        ("            result = self._late(request, await self._handle(request, peer, security, throttle), rule, peer, started)",
         "            result = self._late(request, await self._handle(request, peer, security, throttle) if rule.action == "
         "\"delay\" else error_response(h.api_key, h.api_version, request.body, ErrorCode.NONE), rule, peer, started)"),),
        "a timeout rule never applies the request (it only withholds an empty answer)",
        tests=("compat_tests/test_faults.py::test_timeout_applies_the_request_but_withholds_the_answer",),
        area="fault rules"),
    Mutation("a fault rule with a count faults that many requests, then is gone", "kshim/observability/faults.py", (
        ("        return (self.count is not None and self.applied >= self.count) or \\",
         "        return (self.count is not None and self.applied > self.count) or \\"),),
        "a counted rule faults one request more than its count",
        tests=("tests/test_faults.py::test_an_error_rule_fails_count_requests_then_is_gone",
               "compat_tests/test_faults.py::test_kafka_python_retries_through_injected_not_leader_errors"),
        area="fault rules"),
    # ------------------------------------------------------------------ topic configs
    Mutation("compression.<codec>.level sets the level the broker recompresses at", PARTITION, (
        ('        self.compression_level = {GZIP: config["compression.gzip.level"]',
         '        self.compression_level = None and {GZIP: config["compression.gzip.level"]'),),
        "the topic's compression level is ignored: the codec's default level",
        tests=("compat_tests/test_topic_configs.py::test_compression_level_applies_when_recompressing",),
        area="topic configs"),
    Mutation("a topic's own config wins over the broker's settings, which win over the default",
             "kshim/configs/resolver.py", (
        ("        entries[name] = _resolved(definition, chain[0].value, chain[0].source, tuple(chain))",
         "        top = chain[-2] if len(chain) > 1 else chain[0]\n"
         "        entries[name] = _resolved(definition, top.value, top.source, tuple(chain))"),),
        "the broker's setting wins over the topic's override",
        tests=("tests/test_configs.py::test_topic_override_then_broker_setting_then_default",),
        area="topic configs"),
    Mutation("an empty cleanup.policy deletes nothing by retention", "kshim/log/retention.py", (
        ("                if not cfg.delete:\n", "                if cfg.compact and not cfg.delete:\n"),),
        "a topic with cleanup.policy \"\" loses its old segments to retention.ms / retention.bytes",
        tests=("tests/test_configs.py::test_an_empty_cleanup_policy_neither_deletes_nor_compacts",),
        area="topic configs"),
    Mutation("the internal topics take config changes, as Kafka's KRaft brokers do",
             "kshim/net/handlers/config_resources.py", (
        ("    check_topic_name(name)\n",
         "    check_topic_name(name)\n    if name in (\"__consumer_offsets\", \"__transaction_state\"):\n"
         "        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f\"cannot reconfigure {name}\")\n"),),
        "(Incremental)AlterConfigs on __consumer_offsets or __transaction_state is INVALID_TOPIC_EXCEPTION",
        tests=("tests/test_admin_handlers.py::test_internal_topics_take_config_changes",),
        area="topic configs"),
    # ------------------------------------------------------------------ quotas
    Mutation("a client over its byte-rate quota is throttled for its excess over the whole quota window",
             "kshim/net/quota_manager.py", (
        ("        throttle = round((observed - bound) / bound * rate.window_size_ms(now_ms))",
         "        throttle = round((observed - bound) / bound * self.window_ms)"),),
        "the throttle time is taken over one sample (1 s) instead of the window: a greedy client gets past its quota",
        tests=("tests/test_quotas.py::test_throttle_time_is_the_excess_over_the_quota_times_the_window",
               "tests/test_quotas.py::test_a_greedy_client_that_waits_its_throttle_times_gets_the_quota"),
        area="quotas"),
    # ------------------------------------------------------------------ fetch sessions
    Mutation("an incremental fetch at another epoch than the session's is refused (INVALID_FETCH_SESSION_EPOCH)",
             "kshim/replica/fetch_sessions.py", (
        ("    if session.epoch != epoch:", "    if False:"),),
        "an incremental fetch at any epoch is served",
        tests=("tests/test_fetch_sessions.py::test_session_errors_and_closing",),
        area="fetch sessions"),
    Mutation("an incremental fetch answers a partition whose high watermark moved", "kshim/replica/fetch_sessions.py", (
        ("        if self.high_watermark != data.high_watermark:\n            respond = True\n",
         "        if self.high_watermark != data.high_watermark:\n"),),
        "an incremental fetch leaves out a partition whose only news is its high watermark",
        tests=("tests/test_fetch_sessions.py::test_incremental_answers_only_partitions_with_news_and_rotates_those_with_records",),
        area="fetch sessions"),
    # ------------------------------------------------------------------ connection limits
    Mutation("max.connections bounds the connections open at once, from any number of addresses",
             "kshim/net/server.py", (
        ("        if self.open_connections >= cfg.max_connections:", "        if False:"),),
        "max.connections is ignored: only the per-address limit holds",
        tests=("compat_tests/test_connection_limits.py::test_connection_limits_close_extra_connections_at_once",),
        area="connection limits"),
)
