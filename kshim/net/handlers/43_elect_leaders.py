"""ElectLeaders: leader elections an admin asks for (kafka-leader-election.sh, Admin.electLeaders).

- election_type 0 (PREFERRED; v0 has no type and means it): leadership moves to the partition's
  first replica when it is alive and in the ISR. Already leading: ELECTION_NOT_NEEDED; not alive
  or not in sync: PREFERRED_LEADER_NOT_AVAILABLE (with kshim.commit.quorum=majority also when its
  last reported log end is behind the leader's, since it might lack COMMITTED records).
- election_type 1 (UNCLEAN): only for a partition without a leader (else ELECTION_NOT_NEEDED): an
  alive ISR member if there is one, else the first alive replica, which becomes the whole ISR
  (records only the lost ISR held are gone, as in Kafka); no replica alive:
  ELIGIBLE_LEADERS_NOT_AVAILABLE. Any other type is INVALID_REQUEST for the whole request.
- Unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION for that partition; each partition is
  answered on its own, in request order.
- topic_partitions null: every partition of the cluster; the answer leaves out those whose
  election was not needed (Kafka does the same).
- The answer comes once this broker has applied the new leaders; the leaders themselves take
  over as soon as they apply the image. timeout_ms is not needed for that and is ignored.
- Authorization: ALTER on the cluster (Kafka's ControllerApis), else CLUSTER_AUTHORIZATION_FAILED as
  the top-level error and for every asked partition; nothing is elected.
- The controller unreachable: its error (NOT_CONTROLLER, REQUEST_TIMED_OUT) as the top-level
  error (v1+) and for every asked partition.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.controller.messages import Election
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 43
VERSIONS = (0, 2)

ELECTIONS = {0: Election.PREFERRED, 1: Election.UNCLEAN}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    election = ELECTIONS.get(req.get("election_type", 0))
    if election is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
    asked: dict[str, list[int]] | None = None
    if req.topic_partitions is not None:
        asked = {}
        for topic in req.topic_partitions:
            asked.setdefault(topic.topic, []).extend(topic.partitions)
    try:
        authz.check_cluster(ctx, AclOperation.ALTER)
        results = await ctx.broker.elect_leaders(election, asked)
    except BrokerError as e:  # refused, or the controller is away: every asked partition gets its error
        failed = [{"topic": t, "partition_result": [{"partition_id": i, "error_code": e.code, "error_message": e.message}
                                                    for i in indexes]} for t, indexes in (asked or {}).items()]
        return {"throttle_time_ms": 0, "error_code": e.code, "replica_election_results": failed}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(
            {"partition_id": r.partition, "error_code": r.error_code, "error_message": r.message})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "replica_election_results": [{"topic": t, "partition_result": parts} for t, parts in by_topic.items()]}
