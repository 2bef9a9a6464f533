"""The broker configs two client libraries' own integration suites give Kafka 4.x, line for line,
for tests that start kshim with them (`kshim serve --config-file`): kafka-python's KRaft
kafka.properties template (test/integration/fixtures.py) for a PLAINTEXT broker, and the
server.properties trivup writes for confluent-kafka-python's suite (trivup's template, the
suite's TestUtils.broker_conf() lines, then trivup's KRaft lines). Only the placeholders are
filled in: ports, directories, and 127.0.0.1 where they listen on every interface (tests listen
on the loopback only)."""
from __future__ import annotations

from pathlib import Path

from kshim.testing import free_port_block

KAFKA_PYTHON = """\
process.roles=broker,controller
node.id={broker_id}
controller.quorum.bootstrap.servers={host}:{controller_port}
listeners={transport}://{host}:{port},CONTROLLER://{host}:{controller_port}
inter.broker.listener.name={transport}
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
advertised.listeners={transport}://{host}:{port},CONTROLLER://{host}:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={log_dir}
num.partitions={partitions}
default.replication.factor={replicas}
replica.lag.time.max.ms=1000
replica.socket.timeout.ms=1000
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=false
offsets.commit.timeout.ms=500
offsets.topic.num.partitions=2
offsets.topic.replication.factor=1
group.min.session.timeout.ms=1000
group.initial.rebalance.delay.ms=0
"""

CONFLUENT_KAFKA_PYTHON = """\
broker.id={appid}
port={port}
reserved.broker.max.id=65536
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port},SASL_PLAINTEXT://{host}:{sasl_port},DOCKER://{host}:{docker_port}
advertised.listeners=PLAINTEXT://{nodename}:{port},SASL_PLAINTEXT://{nodename}:{sasl_port},DOCKER://{docker_host}:{docker_port},CONTROLLER://{docker_host}:{controller_port}
log.dir={log_dir}
log.dirs={log_dir}
num.partitions=4
auto.create.topics.enable=true
delete.topic.enable=true
default.replication.factor=1
offsets.topic.replication.factor=1
security.inter.broker.protocol=SASL_PLAINTEXT
sasl.mechanism.controller.protocol=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
super.users=User:admin
allow.everyone.if.no.acl.found=true
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
offsets.topic.replication.factor=1
offsets.topic.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.share.record.lock.duration.ms=1000
group.share.min.record.lock.duration.ms=1000
broker.rack=RACK{appid}
replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector
process.roles=broker,controller
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,DOCKER:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
sasl.enabled.mechanisms=PLAIN
controller.quorum.voters={appid}@localhost:{controller_port}
"""
# trivup's JAAS file (KAFKA_OPTS, not server.properties) defines the SASL users; kshim takes them
# as options
CONFLUENT_KAFKA_PYTHON_USERS = ("--sasl-user", "admin:admin", "--sasl-user", "sasl_user:sasl_user")


def free_ports(count: int) -> list[int]:
    """`count` free ports on 127.0.0.1 (kshim.testing's search: a slice per xdist worker)."""
    base = free_port_block(count)
    return list(range(base, base + count))


def write_kafka_python(path: Path, log_dir: Path, partitions: int = 2) -> int:
    """kafka-python's properties for a PLAINTEXT broker into `path`; its client port."""
    port, controller_port = free_ports(2)
    path.write_text(KAFKA_PYTHON.format(broker_id=0, host="127.0.0.1", port=port, controller_port=controller_port,
                                        transport="PLAINTEXT", log_dir=log_dir, partitions=partitions, replicas=1))
    return port


def write_confluent_kafka_python(path: Path, log_dir: Path) -> int:
    """confluent-kafka-python's (trivup's) properties into `path`; the PLAINTEXT listener's port."""
    port, controller_port, sasl_port, docker_port = free_ports(4)
    path.write_text(CONFLUENT_KAFKA_PYTHON.format(
        appid=1, host="127.0.0.1", port=port, controller_port=controller_port, sasl_port=sasl_port,
        docker_port=docker_port, nodename="127.0.0.1", docker_host="127.0.0.1", log_dir=log_dir))
    return port
