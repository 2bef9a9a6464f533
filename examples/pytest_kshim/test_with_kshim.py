"""A test suite of your own against kshim, with the kshim pytest plugin's fixtures.

    pip install . pytest kafka-python   # from the kshim checkout; the plugin registers itself (pytest11)
    pytest examples/pytest_kshim

(From a checkout without installing kshim: `python -m pytest -p kshim.testing.plugin examples/pytest_kshim`.)
"""
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def test_produce_and_consume(kshim_broker):
    producer = KafkaProducer(bootstrap_servers=kshim_broker.bootstrap, acks="all")
    producer.send("events", b"hello", partition=0).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kshim_broker.bootstrap, consumer_timeout_ms=5000)
    tp = TopicPartition("events", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    assert [r.value for r in consumer] == [b"hello"]
    consumer.close()


def test_the_producer_retries_a_not_leader_error(kshim_broker, kshim_faults, kshim_requests):
    producer = KafkaProducer(bootstrap_servers=kshim_broker.bootstrap, acks="all", retries=5,
                             retry_backoff_ms=50, client_id="my-service")
    producer.send("orders", b"warm-up", partition=0).get(timeout=20)
    kshim_faults.add("error", api="Produce", topic="orders", partition=0, error="NOT_LEADER_OR_FOLLOWER", count=2)
    assert producer.send("orders", b"42 widgets", partition=0).get(timeout=20).offset == 1
    producer.close()
    produced = [e["errors"] for e in kshim_requests.new(api="Produce", client_id="my-service")]
    assert produced[-3:] == [["NOT_LEADER_OR_FOLLOWER"], ["NOT_LEADER_OR_FOLLOWER"], []]
