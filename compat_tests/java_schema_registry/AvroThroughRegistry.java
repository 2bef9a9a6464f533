import io.confluent.kafka.serializers.KafkaAvroDeserializer;
import io.confluent.kafka.serializers.KafkaAvroSerializer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Produces COUNT Avro records with Confluent's KafkaAvroSerializer (which registers the schema with
 * the registry) and consumes them with KafkaAvroDeserializer (which fetches it by id), printing one
 * line per record read: "record <name> <n>", then "registered-id <id>".
 * Usage: AvroThroughRegistry BOOTSTRAP REGISTRY_URL TOPIC COUNT
 */
public class AvroThroughRegistry {
    static final String SCHEMA = "{\"type\":\"record\",\"name\":\"Reading\",\"namespace\":\"kshim.java\","
        + "\"fields\":[{\"name\":\"sensor\",\"type\":\"string\"},{\"name\":\"value\",\"type\":\"long\"}]}";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], registry = args[1], topic = args[2];
        int count = Integer.parseInt(args[3]);
        Schema schema = new Schema.Parser().parse(SCHEMA);

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", KafkaAvroSerializer.class.getName());
        p.put("schema.registry.url", registry);
        try (KafkaProducer<String, Object> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                GenericRecord r = new GenericData.Record(schema);
                r.put("sensor", "s" + i);
                r.put("value", (long) i * 10);
                producer.send(new ProducerRecord<>(topic, "k" + i, r)).get();
            }
        }

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "java-avro-" + topic);
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", KafkaAvroDeserializer.class.getName());
        c.put("schema.registry.url", registry);
        List<GenericRecord> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        try (KafkaConsumer<String, Object> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (got.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Object> rec : consumer.poll(Duration.ofMillis(500))) {
                    got.add((GenericRecord) rec.value());
                }
            }
        }
        for (GenericRecord r : got) {
            System.out.println("record " + r.get("sensor") + " " + r.get("value"));
        }
        System.out.flush();
    }
}
