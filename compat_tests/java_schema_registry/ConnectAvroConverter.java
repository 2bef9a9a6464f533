import io.confluent.connect.avro.AvroConverter;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;

/**
 * Kafka Connect's AvroConverter (Confluent's) against a registry: converts a Connect Struct to
 * bytes (registering its Avro schema under TOPIC-value) and back, printing "struct <the struct>".
 * Usage: ConnectAvroConverter REGISTRY_URL TOPIC
 */
public class ConnectAvroConverter {
    public static void main(String[] args) {
        String registry = args[0], topic = args[1];
        AvroConverter converter = new AvroConverter();
        converter.configure(Map.of("schema.registry.url", registry), false);
        Schema schema = SchemaBuilder.struct().name("kshim.connect.Row")
            .field("id", Schema.INT64_SCHEMA).field("label", Schema.STRING_SCHEMA).build();
        Struct row = new Struct(schema).put("id", 42L).put("label", "answer");
        byte[] bytes = converter.fromConnectData(topic, schema, row);
        SchemaAndValue back = converter.toConnectData(topic, bytes);
        Struct got = (Struct) back.value();  // its schema gains the registry's version: compare the fields
        if (!row.get("id").equals(got.get("id")) || !row.get("label").equals(got.get("label"))) {
            throw new AssertionError("read back " + back.value() + ", wrote " + row);
        }
        System.out.println("struct " + back.value());
    }
}
