"""The cluster-wide records that elect nothing: dynamic broker configs, group configs,
client-metrics subscriptions, ACLs, SCRAM credentials, client quotas and finalized features; and
producer id blocks and DescribeQuorum's answer.

Separate from the operations on brokers, topics and partitions: each of these validates one kind
of record, stores it and publishes it, and none touches a partition's leader or replicas.
"""
from __future__ import annotations

import logging
from collections import Counter

from kshim.security.acls import AclBinding, AclFilter, InvalidAcl, validate_binding
from kshim.cluster.image import SUPPORTED_FEATURES, ScramEntry
from kshim.configs import client_metrics, quotas, validate_broker
from kshim.configs.groups import check_group_names
from kshim.controller.messages import (
    DeletedAcls, FeatureUpdate, FeatureUpgrade, QuorumReplica, QuorumState, QuotaAlteration, QuotaAlterationResult,
    ScramDeletion, ScramResult)
from kshim.controller.state import ControllerState
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")

MAX_PRODUCER_ID_BLOCK = 1_000_000  # ids a broker may reserve at once (it asks for 1000, as Kafka does)
MAX_ACLS = 100_000  # every image carries every binding to every broker: bound them


class ClusterSettings(ControllerState):
    # ------------------------------------------------------------------ dynamic configs
    def set_broker_configs(self, resource: str, configs: dict[str, str | None], *,
                           validate_only: bool = False) -> None:
        """Replace the dynamic settings of one broker (resource = its node id) or of the
        cluster-wide default (resource ""); the caller computed the full set."""
        if resource != "" and (not resource.isdigit() or int(resource) not in self._brokers):
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"no broker {resource!r} in the cluster")
        clean = validate_broker(configs)
        if validate_only:
            return
        self.store.replace_broker_configs(resource, clean)
        if clean:
            self._broker_configs[resource] = clean
        else:
            self._broker_configs.pop(resource, None)
        log.info("dynamic broker configs of %s: %s", repr(resource) if resource else "the cluster default", clean)
        self._publish()

    def set_group_configs(self, group: str, configs: dict[str, str | None], *, validate_only: bool = False) -> None:
        """Replace a group's config overrides (GROUP resource); the broker computed the full set and
        checked it against its group settings' bounds, the controller checks names and types."""
        if not group:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group id")
        clean = check_group_names(configs)
        if validate_only:
            return
        if clean == self._group_configs.get(group, {}):
            return
        self.store.replace_group_configs(group, clean)
        if clean:
            self._group_configs[group] = clean
        else:
            self._group_configs.pop(group, None)
        log.info("group configs of %r: %s", group, clean)
        self._publish()

    def set_client_metrics(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace a client-metrics subscription's configs (Kafka's CLIENT_METRICS resource); an
        empty set removes it."""
        client_metrics.parse(name, configs)  # raises BrokerError as Kafka's validation
        if validate_only:
            return
        self.store.replace_client_metrics(name, dict(configs))
        if configs:
            self._client_metrics[name] = dict(configs)
        elif self._client_metrics.pop(name, None) is None:
            return
        log.info("client-metrics subscription %r: %s", name, configs or "removed")
        self._publish()

    # ------------------------------------------------------------------ ACLs
    def create_acls(self, acls: tuple[AclBinding, ...]) -> None:
        try:
            for acl in acls:
                validate_binding(acl)
        except InvalidAcl as e:
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        new = [a for a in dict.fromkeys(acls) if a not in self._acls]
        if not new:
            return
        if len(self._acls) + len(new) > MAX_ACLS:
            raise BrokerError(ErrorCode.POLICY_VIOLATION,
                              f"the cluster holds {len(self._acls)} ACLs; {len(new)} more would pass its limit of {MAX_ACLS}")
        self.store.change_acls(new, [])
        self._acls.update(dict.fromkeys(new))
        log.info("created %d ACL(s)", len(new))
        self._publish()

    def delete_acls(self, filters: tuple[AclFilter, ...]) -> tuple[DeletedAcls, ...]:
        matched = tuple(DeletedAcls(tuple(a for a in self._acls if f.matches(a))) for f in filters)
        gone = list(dict.fromkeys(a for m in matched for a in m.acls))
        if gone:
            self.store.change_acls([], gone)
            for acl in gone:
                del self._acls[acl]
            log.info("deleted %d ACL(s)", len(gone))
            self._publish()
        return matched

    def alter_scram_credentials(self, deletions: tuple[ScramDeletion, ...],
                                upsertions: tuple[ScramEntry, ...]) -> tuple[ScramResult, ...]:
        """Kafka's ScramControlManager: a user named twice in one request is DUPLICATE_RESOURCE, a
        deletion of a credential that does not exist RESOURCE_NOT_FOUND; each user's alterations
        apply or fail together (the broker checked mechanisms and iterations)."""
        named = Counter([d.user for d in deletions] + [u.user for u in upsertions])
        results: dict[str, ScramResult] = {}
        delete: list[tuple[str, str]] = []
        upsert: list[ScramEntry] = []
        for user, count in named.items():
            if count > 1:
                results[user] = ScramResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                            "A user credential cannot be altered twice in the same request")
        for d in deletions:
            if d.user in results:
                continue
            if (d.user, d.mechanism) not in self._scram:
                results[d.user] = ScramResult(d.user, ErrorCode.RESOURCE_NOT_FOUND,
                                              "Attempt to delete a user credential that does not exist")
                continue
            delete.append((d.user, d.mechanism))
            results[d.user] = ScramResult(d.user, ErrorCode.NONE, None)
        for u in upsertions:
            if u.user not in results:
                upsert.append(u)
                results[u.user] = ScramResult(u.user, ErrorCode.NONE, None)
        if delete or upsert:
            self.store.alter_scram(delete, upsert)  # the store first: memory changes only once it is written
            for key in delete:
                self._scram.pop(key, None)
            for entry in upsert:
                self._scram[(entry.user, entry.mechanism)] = entry
            log.info("SCRAM credentials: %d set, %d deleted", len(upsert), len(delete))
            self._publish()
        return tuple(results[user] for user in named)

    def alter_client_quotas(self, alterations: tuple[QuotaAlteration, ...], *,
                            validate_only: bool = False) -> tuple[QuotaAlterationResult, ...]:
        """AlterClientQuotas: each entity is validated and changed on its own (Kafka's
        ClientQuotaControlManager); the valid ones are stored in one transaction, then published."""
        results: list[QuotaAlterationResult] = []
        changes: dict[quotas.Entity, dict[str, float]] = {}
        seen: set[quotas.Entity] = set()
        for alteration in alterations:
            try:
                entity = quotas.entity_of((p.type, p.name) for p in alteration.entity)
                if entity in seen:
                    raise BrokerError(ErrorCode.INVALID_REQUEST,
                                      f"Ignoring duplicate entity {quotas.describe_entity(entity)}")
                seen.add(entity)
                new = quotas.alter(self._quotas.get(entity, {}), entity, alteration.ops)
            except BrokerError as e:
                results.append(QuotaAlterationResult(int(e.code), e.message))
                continue
            if new != self._quotas.get(entity, {}):
                changes[entity] = new
            results.append(QuotaAlterationResult(int(ErrorCode.NONE), None))
        if changes and not validate_only:
            self.store.replace_client_quotas({tuple((p.type, p.name) for p in entity): values
                                              for entity, values in changes.items()})
            for entity, values in changes.items():
                if values:
                    self._quotas[entity] = values
                else:
                    self._quotas.pop(entity, None)
                log.info("client quotas of %s: %s", quotas.describe_entity(entity), values)
            self._publish()
        return tuple(results)

    def allocate_producer_ids(self, count: int = 1) -> int:
        """A block of `count` producer ids (KIP-730): brokers serve InitProducerId from their block."""
        if not 1 <= count <= MAX_PRODUCER_ID_BLOCK:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"a producer id block holds 1 to {MAX_PRODUCER_ID_BLOCK} ids, asked for {count}")
        return self.store.allocate_producer_ids(count)

    # ------------------------------------------------------------------ the quorum and features
    def describe_quorum(self) -> QuorumState:
        """The controller as a quorum of one voter (its log is the image versions) and the
        registered brokers as observers, with the last image version each reported."""
        now = self.clock.wall_ms()
        me = QuorumReplica(self.config.node_id, self.version, now, now)
        observers = tuple(QuorumReplica(b.info.node_id, b.image_version, b.last_heartbeat_ms, b.caught_up_ms)
                          for b in sorted(self._brokers.values(), key=lambda b: b.info.node_id) if b.info.alive)
        return QuorumState(self.config.node_id, self.epoch, self.version, (me,), observers)

    def update_features(self, updates: tuple[FeatureUpdate, ...], validate_only: bool = False) -> None:
        """Kafka's UpdateFeatures (FeatureControlManager): every update is checked, the first bad
        one is the answer (INVALID_UPDATE_VERSION) and nothing changes; else all are finalized."""
        levels = dict(self._features)
        for u in updates:
            self._check_feature_update(u, levels.get(u.name, 0))
            levels[u.name] = u.level
        if validate_only:
            return
        levels = {name: level for name, level in levels.items() if level > 0}
        if levels == self._features:
            return
        epoch = self.version + 1  # the image that carries them
        self.store.save_features({name: levels.get(name, 0) for name in SUPPORTED_FEATURES}, epoch)
        self._features, self._features_epoch = levels, epoch
        log.info("finalized features: %s (epoch %d)", levels, epoch)
        self._publish()

    @staticmethod
    def _check_feature_update(u: FeatureUpdate, current: int) -> None:
        def invalid(reason: str) -> BrokerError:
            return BrokerError(ErrorCode.INVALID_UPDATE_VERSION,
                               f"invalid update version {u.level} for feature {u.name}: {reason}")

        if u.level < 0:
            raise invalid("a feature version cannot be less than 0")
        supported = SUPPORTED_FEATURES.get(u.name)
        if supported is None:
            if u.level != 0:
                raise invalid("kshim does not support this feature")
        elif not supported[0] <= u.level <= supported[1] and not (u.level == 0 and supported[0] == 0):
            raise invalid(f"kshim supports versions {supported[0]} to {supported[1]}")
        if u.level < current and u.upgrade is FeatureUpgrade.UPGRADE:
            raise invalid("can't downgrade the version of this feature without setting the upgrade type to "
                          "either safe or unsafe downgrade")
        if u.level > current and u.upgrade is not FeatureUpgrade.UPGRADE:
            raise invalid("can't downgrade to a newer version")
