import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Apache Kafka Java client driven from kshim's compat tests (compat_tests/java_client.py).
 *
 * Every client keeps the Java client's defaults except bootstrap.servers and what a subcommand
 * needs (serializers, a group id, auto.offset.reset=earliest, ...); --prop k=v adds more.
 * Output: one JSON object per line on stdout ("type" says what it is); diagnostics on stderr.
 * Failure: a line "kshim-client error: ..." on stderr and a non-zero exit. Every wait is bounded:
 * client calls take explicit timeouts and a watchdog ends the JVM at --deadline-ms (default 60 s).
 *
 *   produce  BOOTSTRAP TOPIC N [--acks A] [--compression C[,C...]] [--key-prefix P] [--value-size B]
 *            [--hold-until-file PATH]   (the producer stays open after its records until PATH exists)
 *   consume  BOOTSTRAP TOPIC GROUP N [--isolation read_committed|read_uncommitted] [--until-end]
 *                                   [--extra-ms MS] [--timeout-ms MS] [--hold-until-file PATH] [--assign]
 *            subscribes as a member of GROUP and commits what it printed; with --assign it assigns
 *            every partition and seeks to the beginning, without commits (GROUP "-": no group.id)
 *   admin    BOOTSTRAP OP ARGS... [, OP ARGS...]     ops: create-topic T P [k=v...], list-topics,
 *            describe-topic T, describe-configs T, describe-cluster, list-groups, describe-group G,
 *            wait-group G STATE MEMBERS, group-offsets G, list-offsets T earliest|latest|max-timestamp,
 *            delete-topic T, alter-quota ENTITY KEY=VALUE|KEY=- ... [validate-only],
 *            describe-quotas [strict] [TYPE | TYPE=NAME ...]; ENTITY is TYPE=NAME[,TYPE=NAME], the
 *            name <default> for the default entity; KEY=- removes the key; quota errors are
 *            {"type":"quota-error","error":exception class,"message":...}
 *   txn      BOOTSTRAP TRANSACTIONAL_ID TOPIC PLAN    PLAN: commit:N,abort:N,... (one transaction each)
 *   copy     BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID N [--timeout-ms MS] [--min-txn-ms MS]
 *            exactly-once consume-transform-produce: "out-" + value to the same partition of OUTPUT,
 *            the input offsets committed in the same transaction; stops once the group's committed
 *            input offsets add up to N (an input of plain records from offset 0); progress lines
 *            {"type":"progress","committed":n,"aborts":a,"restarts":r,...}
 *
 * Options valid everywhere: --prop k=v (repeatable), --deadline-ms MS.
 */
public final class KshimClient {
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(20);

    public static void main(String[] argv) {
        List<String> args = new ArrayList<>(Arrays.asList(argv));
        Map<String, String> props = new LinkedHashMap<>();
        long deadlineMs = 60_000;
        for (int i = 0; i < args.size(); ) {
            if (args.get(i).equals("--prop") && i + 1 < args.size()) {
                String kv = args.get(i + 1);
                int eq = kv.indexOf('=');
                if (eq <= 0) fail("--prop wants k=v, got " + kv);
                props.put(kv.substring(0, eq), kv.substring(eq + 1));
                args.subList(i, i + 2).clear();
            } else if (args.get(i).equals("--deadline-ms") && i + 1 < args.size()) {
                deadlineMs = Long.parseLong(args.get(i + 1));
                args.subList(i, i + 2).clear();
            } else {
                i++;
            }
        }
        startWatchdog(deadlineMs);
        if (args.size() < 2) fail("usage: KshimClient produce|consume|admin|txn|copy BOOTSTRAP ...");
        String command = args.get(0);
        String bootstrap = args.get(1);
        List<String> rest = args.subList(2, args.size());
        try {
            switch (command) {
                case "produce": produce(bootstrap, rest, props); break;
                case "consume": consume(bootstrap, rest, props); break;
                case "admin": admin(bootstrap, rest, props); break;
                case "txn": txn(bootstrap, rest, props); break;
                case "txn-bench": txnBench(bootstrap, rest, props); break;
                case "copy": copy(bootstrap, rest, props); break;
                default: fail("unknown subcommand " + command);
            }
        } catch (Throwable t) {
            Throwable cause = (t instanceof ExecutionException && t.getCause() != null) ? t.getCause() : t;
            System.out.flush();
            System.err.println("kshim-client error: " + command + ": " + cause);
            cause.printStackTrace(System.err);
            System.err.flush();
            Runtime.getRuntime().halt(1);
        }
        System.out.flush();
        // Client threads are closed by now; halt so that a lingering non-daemon thread cannot hang us.
        Runtime.getRuntime().halt(0);
    }

    // ------------------------------------------------------------------------------- produce
    static void produce(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        Opts o = new Opts(args, 2);
        String topic = o.positional.get(0);
        int n = Integer.parseInt(o.positional.get(1));
        String keyPrefix = o.get("key-prefix", "key-");
        int valueSize = Integer.parseInt(o.get("value-size", "0"));
        List<String> codecs = o.has("compression") ? Arrays.asList(o.get("compression", "").split(",")) : Collections.singletonList(null);
        for (String codec : codecs) {
            Map<String, Object> conf = base(bootstrap, extra);
            conf.put("key.serializer", StringSerializer.class.getName());
            conf.put("value.serializer", StringSerializer.class.getName());
            if (o.has("acks")) conf.put("acks", o.get("acks", null));
            if (codec != null) conf.put("compression.type", codec);
            ProducerConfig effective = new ProducerConfig(conf);
            emit(obj("type", "producer_config", "acks", effective.getString("acks"),
                    "enable.idempotence", effective.getBoolean("enable.idempotence"),
                    "compression.type", effective.getString("compression.type"),
                    "max.in.flight.requests.per.connection", effective.getInt("max.in.flight.requests.per.connection")));
            String prefix = codec == null ? keyPrefix : keyPrefix + codec + "-";
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(conf)) {
                List<Future<RecordMetadata>> sent = new ArrayList<>(n);
                List<String> keys = new ArrayList<>(n), values = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    String key = prefix + i;
                    String value = pad("value-" + (codec == null ? "" : codec + "-") + i, valueSize);
                    ProducerRecord<String, String> rec = new ProducerRecord<>(topic, key, value);
                    rec.headers().add("seq", Integer.toString(i).getBytes("UTF-8"));
                    keys.add(key);
                    values.add(value);
                    sent.add(producer.send(rec));
                }
                producer.flush();
                for (int i = 0; i < n; i++) {
                    RecordMetadata md = sent.get(i).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                    emit(obj("type", "sent", "topic", md.topic(), "partition", md.partition(), "offset", md.offset(),
                            "key", keys.get(i), "value", values.get(i), "seq", i));
                }
                // stay open (its background work going on: metadata, telemetry pushes) until the test says so
                if (o.has("hold-until-file")) {
                    emit(obj("type", "holding"));
                    java.nio.file.Path file = java.nio.file.Paths.get(o.get("hold-until-file", ""));
                    while (!java.nio.file.Files.exists(file)) Thread.sleep(50);  // bounded by the --deadline-ms watchdog
                }
                producer.close(CALL_TIMEOUT);
            }
        }
        emit(obj("type", "done"));
    }

    static String pad(String s, int size) {
        if (s.length() >= size) return s;
        StringBuilder b = new StringBuilder(s).append('|');
        while (b.length() < size) b.append((char) ('a' + b.length() % 26));
        return b.toString();
    }

    // ------------------------------------------------------------------------------- consume
    static void consume(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        Opts o = new Opts(args, 3);
        String topic = o.positional.get(0);
        String group = o.positional.get(1);
        int n = Integer.parseInt(o.positional.get(2));
        boolean untilEnd = o.has("until-end");
        long extraMs = Long.parseLong(o.get("extra-ms", "0"));
        long timeoutMs = Long.parseLong(o.get("timeout-ms", "30000"));
        Map<String, Object> conf = base(bootstrap, extra);
        conf.put("key.deserializer", StringDeserializer.class.getName());
        conf.put("value.deserializer", StringDeserializer.class.getName());
        boolean assign = o.has("assign");   // Spark's way: assign every partition, seek, never commit
        if (!group.equals("-")) conf.putIfAbsent("group.id", group);
        conf.putIfAbsent("auto.offset.reset", "earliest");   // a new group reads the topic from its start
        conf.putIfAbsent("enable.auto.commit", "false");     // commits are explicit: exactly what was printed
        if (o.has("isolation")) conf.put("isolation.level", o.get("isolation", null));

        int count = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        Map<TopicPartition, Long> ends = null;
        Set<TopicPartition> endsFor = null;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(conf)) {
            int partitions = consumer.partitionsFor(topic, CALL_TIMEOUT).size();
            if (assign) {
                List<TopicPartition> all = new ArrayList<>();
                for (int p = 0; p < partitions; p++) all.add(new TopicPartition(topic, p));
                consumer.assign(all);
                consumer.seekToBeginning(all);
            } else {
                consumer.subscribe(Collections.singletonList(topic));
            }
            while (true) {
                if (!untilEnd && count >= n) break;
                if (untilEnd) {
                    Set<TopicPartition> assigned = consumer.assignment();
                    if (assigned.size() == partitions) {
                        if (!assigned.equals(endsFor)) {
                            ends = consumer.endOffsets(assigned, CALL_TIMEOUT);   // the LSO for read_committed
                            endsFor = new HashSet<>(assigned);
                        }
                        boolean caughtUp = true;
                        for (TopicPartition tp : assigned)
                            if (consumer.position(tp, CALL_TIMEOUT) < ends.get(tp)) caughtUp = false;
                        if (caughtUp) break;
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    emit(obj("type", "done", "count", count, "timed_out", true));
                    throw new IllegalStateException("consumed " + count + (untilEnd ? " records without reaching the end offsets "
                            + ends : " of " + n + " records") + " within " + timeoutMs + " ms; assignment " + consumer.assignment());
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    if (!untilEnd && count >= n) break;
                    emit(record("record", r));
                    processed.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    count++;
                }
                if (!processed.isEmpty() && !assign) {
                    consumer.commitSync(processed, CALL_TIMEOUT);
                    emit(obj("type", "committed", "offsets", tpMap(processed)));
                }
            }
            // stay a member of the group (polling) until the test says so, e.g. while it describes the group
            if (o.has("hold-until-file")) {
                emit(obj("type", "holding"));
                java.nio.file.Path file = java.nio.file.Paths.get(o.get("hold-until-file", ""));
                while (!java.nio.file.Files.exists(file)) {
                    if (System.currentTimeMillis() > deadline) throw new IllegalStateException("hold file " + file + " never appeared");
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) emit(record("extra", r));
                }
            }
            // a bounded check for records beyond what was expected (duplicates, aborted data)
            long extraDeadline = System.currentTimeMillis() + extraMs;
            while (extraMs > 0 && System.currentTimeMillis() < extraDeadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) emit(record("extra", r));
            }
            List<String> assignment = new ArrayList<>();
            for (TopicPartition tp : consumer.assignment()) assignment.add(tp.toString());
            Collections.sort(assignment);
            emit(obj("type", "assignment", "partitions", assignment,
                    "member_id", group.equals("-") ? null : consumer.groupMetadata().memberId(),
                    "generation", group.equals("-") ? null : consumer.groupMetadata().generationId()));
            consumer.close(CloseOptions.timeout(CALL_TIMEOUT));
        }
        emit(obj("type", "done", "count", count, "timed_out", false));
    }

    static Map<String, Object> record(String type, ConsumerRecord<String, String> r) throws Exception {
        Map<String, Object> headers = new LinkedHashMap<>();
        for (Header h : r.headers()) headers.put(h.key(), h.value() == null ? null : new String(h.value(), "UTF-8"));
        return obj("type", type, "topic", r.topic(), "partition", r.partition(), "offset", r.offset(),
                "key", r.key(), "value", r.value(), "headers", headers, "timestamp", r.timestamp(),
                "timestamp_type", r.timestampType().toString());
    }

    // ------------------------------------------------------------------------------- admin
    static void admin(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        List<List<String>> ops = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (String a : args) {
            if (a.equals(",")) { if (!cur.isEmpty()) ops.add(cur); cur = new ArrayList<>(); }
            else cur.add(a);
        }
        if (!cur.isEmpty()) ops.add(cur);
        if (ops.isEmpty()) fail("admin: no operation");
        try (Admin admin = Admin.create(new HashMap<>(base(bootstrap, extra)))) {
            for (List<String> op : ops) adminOp(admin, op.get(0), op.subList(1, op.size()));
            admin.close(CALL_TIMEOUT);
        }
        emit(obj("type", "done"));
    }

    static void adminOp(Admin admin, String op, List<String> a) throws Exception {
        long t = CALL_TIMEOUT.toMillis();
        TimeUnit ms = TimeUnit.MILLISECONDS;
        switch (op) {
            case "create-topic": {
                need(op, a, 2);
                Map<String, String> configs = new HashMap<>();
                for (String kv : a.subList(2, a.size())) configs.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
                // replication factor: the broker's default (Optional.empty), as a user on a dev broker would do
                NewTopic nt = new NewTopic(a.get(0), java.util.Optional.of(Integer.parseInt(a.get(1))), java.util.Optional.empty()).configs(configs);
                admin.createTopics(Collections.singletonList(nt)).all().get(t, ms);
                emit(obj("type", "created", "topic", a.get(0)));
                break;
            }
            case "list-topics": {
                List<String> names = new ArrayList<>(admin.listTopics().names().get(t, ms));
                Collections.sort(names);
                emit(obj("type", "topics", "names", names));
                break;
            }
            case "describe-topic": {
                need(op, a, 1);
                TopicDescription d = admin.describeTopics(Collections.singletonList(a.get(0))).allTopicNames().get(t, ms).get(a.get(0));
                List<Object> parts = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions())
                    parts.add(obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                            "replicas", ids(p.replicas()), "isr", ids(p.isr())));
                emit(obj("type", "topic", "name", d.name(), "topic_id", String.valueOf(d.topicId()), "internal", d.isInternal(),
                        "partitions", parts));
                break;
            }
            case "describe-configs": {
                need(op, a, 1);
                ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, a.get(0));
                Config c = admin.describeConfigs(Collections.singletonList(res)).all().get(t, ms).get(res);
                Map<String, Object> entries = new TreeMap<>();
                for (ConfigEntry e : c.entries())
                    entries.put(e.name(), obj("value", e.value(), "source", e.source().toString(), "default", e.isDefault()));
                emit(obj("type", "configs", "topic", a.get(0), "entries", entries));
                break;
            }
            case "describe-cluster": {
                DescribeClusterResult r = admin.describeCluster();
                List<Object> nodes = new ArrayList<>();
                for (Node nd : r.nodes().get(t, ms)) nodes.add(obj("id", nd.id(), "host", nd.host(), "port", nd.port()));
                Node controller = r.controller().get(t, ms);
                emit(obj("type", "cluster", "cluster_id", r.clusterId().get(t, ms),
                        "controller", controller == null ? null : controller.id(), "nodes", nodes));
                break;
            }
            case "list-groups": {
                List<Object> groups = new ArrayList<>();
                for (GroupListing g : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(t, ms))
                    groups.add(obj("group_id", g.groupId(), "state", g.groupState().map(Object::toString).orElse(null),
                            "type", g.type().map(Object::toString).orElse(null), "protocol", g.protocol()));
                emit(obj("type", "groups", "groups", groups));
                break;
            }
            case "describe-group": {
                need(op, a, 1);
                emit(describeGroup(admin, a.get(0)));
                break;
            }
            case "wait-group": {
                // wait-group G STATE MEMBERS: until the group is in STATE with MEMBERS members, each assigned
                need(op, a, 3);
                long deadline = System.currentTimeMillis() + t;
                while (true) {
                    Map<String, Object> d = describeGroup(admin, a.get(0));
                    List<?> members = (List<?>) d.get("members");
                    boolean assigned = true;
                    for (Object m : members) if (((List<?>) ((Map<?, ?>) m).get("assignment")).isEmpty()) assigned = false;
                    if (a.get(1).equalsIgnoreCase((String) d.get("state")) && members.size() == Integer.parseInt(a.get(2)) && assigned) {
                        emit(d);
                        break;
                    }
                    if (System.currentTimeMillis() > deadline)
                        throw new IllegalStateException("group " + a.get(0) + " not " + a.get(1) + " with " + a.get(2)
                                + " assigned members within " + t + " ms: " + d);
                    Thread.sleep(100);
                }
                break;
            }
            case "group-offsets": {
                need(op, a, 1);
                Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(a.get(0)).partitionsToOffsetAndMetadata().get(t, ms);
                emit(obj("type", "group_offsets", "group_id", a.get(0), "offsets", tpMap(offs)));
                break;
            }
            case "list-offsets": {
                need(op, a, 2);
                TopicDescription d = admin.describeTopics(Collections.singletonList(a.get(0))).allTopicNames().get(t, ms).get(a.get(0));
                OffsetSpec spec;
                switch (a.get(1)) {
                    case "earliest": spec = OffsetSpec.earliest(); break;
                    case "latest": spec = OffsetSpec.latest(); break;
                    case "max-timestamp": spec = OffsetSpec.maxTimestamp(); break;
                    default: throw new IllegalArgumentException("list-offsets: earliest|latest|max-timestamp, not " + a.get(1));
                }
                Map<TopicPartition, OffsetSpec> q = new HashMap<>();
                for (TopicPartitionInfo p : d.partitions()) q.put(new TopicPartition(a.get(0), p.partition()), spec);
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : admin.listOffsets(q).all().get(t, ms).entrySet())
                    out.put(Integer.toString(e.getKey().partition()), e.getValue().offset());
                emit(obj("type", "offsets", "topic", a.get(0), "spec", a.get(1), "offsets", out));
                break;
            }
            case "delete-topic": {
                need(op, a, 1);
                admin.deleteTopics(Collections.singletonList(a.get(0))).all().get(t, ms);
                emit(obj("type", "deleted", "topic", a.get(0)));
                break;
            }
            case "alter-quota": {
                need(op, a, 1);
                Map<String, String> entity = new HashMap<>();
                for (String part : a.get(0).split(",")) {
                    String name = part.substring(part.indexOf('=') + 1);
                    entity.put(part.substring(0, part.indexOf('=')), name.equals("<default>") ? null : name);
                }
                List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
                boolean validateOnly = false;
                for (String kv : a.subList(1, a.size())) {
                    if (kv.equals("validate-only")) { validateOnly = true; continue; }
                    String v = kv.substring(kv.indexOf('=') + 1);
                    ops.add(new ClientQuotaAlteration.Op(kv.substring(0, kv.indexOf('=')), v.equals("-") ? null : Double.valueOf(v)));
                }
                try {
                    admin.alterClientQuotas(Collections.singletonList(new ClientQuotaAlteration(new ClientQuotaEntity(entity), ops)),
                            new AlterClientQuotasOptions().validateOnly(validateOnly)).all().get(t, ms);
                    emit(obj("type", "quota-altered"));
                } catch (ExecutionException e) {
                    emit(obj("type", "quota-error", "error", e.getCause().getClass().getSimpleName(), "message", e.getCause().getMessage()));
                }
                break;
            }
            case "describe-quotas": {
                boolean strict = false;
                List<ClientQuotaFilterComponent> components = new ArrayList<>();
                for (String c : a) {
                    int eq = c.indexOf('=');
                    if (c.equals("strict")) strict = true;
                    else if (eq < 0) components.add(ClientQuotaFilterComponent.ofEntityType(c));
                    else if (c.substring(eq + 1).equals("<default>")) components.add(ClientQuotaFilterComponent.ofDefaultEntity(c.substring(0, eq)));
                    else components.add(ClientQuotaFilterComponent.ofEntity(c.substring(0, eq), c.substring(eq + 1)));
                }
                ClientQuotaFilter filter = strict ? ClientQuotaFilter.containsOnly(components) : ClientQuotaFilter.contains(components);
                try {
                    List<Object> entries = new ArrayList<>();
                    for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : admin.describeClientQuotas(filter).entities().get(t, ms).entrySet()) {
                        Map<String, Object> names = new TreeMap<>();
                        for (Map.Entry<String, String> part : e.getKey().entries().entrySet())
                            names.put(part.getKey(), part.getValue() == null ? "<default>" : part.getValue());
                        entries.add(obj("entity", names, "values", new TreeMap<>(e.getValue())));
                    }
                    emit(obj("type", "quotas", "entries", entries));
                } catch (ExecutionException e) {
                    emit(obj("type", "quota-error", "error", e.getCause().getClass().getSimpleName(), "message", e.getCause().getMessage()));
                }
                break;
            }
            default:
                throw new IllegalArgumentException("unknown admin operation " + op);
        }
    }

    static Map<String, Object> describeGroup(Admin admin, String group) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(Collections.singletonList(group)).all()
                .get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).get(group);
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            List<String> tps = new ArrayList<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) tps.add(tp.toString());
            Collections.sort(tps);
            members.add(obj("member_id", m.consumerId(), "client_id", m.clientId(), "host", m.host(), "assignment", tps));
        }
        return obj("type", "group", "group_id", d.groupId(), "state", String.valueOf(d.groupState()),
                "group_type", String.valueOf(d.type()), "assignor", d.partitionAssignor(),
                "coordinator", d.coordinator() == null ? null : d.coordinator().id(), "members", members);
    }

    static List<Integer> ids(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node nd : nodes) out.add(nd.id());
        return out;
    }

    static void need(String op, List<String> a, int n) {
        if (a.size() < n) throw new IllegalArgumentException(op + " wants " + n + " arguments, got " + a);
    }

    // ------------------------------------------------------------------------------- txn
    static void txn(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        Opts o = new Opts(args, 3);
        String txId = o.positional.get(0);
        String topic = o.positional.get(1);
        String plan = o.positional.get(2);
        Map<String, Object> conf = base(bootstrap, extra);
        conf.put("key.serializer", StringSerializer.class.getName());
        conf.put("value.serializer", StringSerializer.class.getName());
        conf.put("transactional.id", txId);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(conf)) {
            producer.initTransactions();
            emit(obj("type", "initialized", "transactional_id", txId));
            int step = 0;
            for (String part : plan.split(",")) {
                String[] kv = part.split(":");
                String outcome = kv[0];
                int n = Integer.parseInt(kv[1]);
                if (!outcome.equals("commit") && !outcome.equals("abort")) fail("txn plan: commit:N or abort:N, not " + part);
                producer.beginTransaction();
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                List<String> keys = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String key = "t" + step + "-" + i;
                    keys.add(key);
                    sent.add(producer.send(new ProducerRecord<>(topic, key, outcome + "-" + step + "-" + i)));
                }
                List<Object> recs = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    RecordMetadata md = sent.get(i).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                    recs.add(obj("key", keys.get(i), "partition", md.partition(), "offset", md.offset()));
                }
                if (outcome.equals("commit")) producer.commitTransaction(); else producer.abortTransaction();
                emit(obj("type", "txn", "step", step, "outcome", outcome, "records", recs));
                step++;
            }
            producer.close(CALL_TIMEOUT);
        }
        emit(obj("type", "done"));
    }

    /**
     * bench/transactions_v2.py: TXID TOPIC SECONDS SIZE [VALUE_BYTES] -- committed transactions of SIZE
     * records (sent, flushed, then commitTransaction) for SECONDS after initTransactions; emits the count,
     * the time and commit latency percentiles (flush and commitTransaction).
     */
    static void txnBench(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        Opts o = new Opts(args, 4);
        String txId = o.positional.get(0), topic = o.positional.get(1);
        double seconds = Double.parseDouble(o.positional.get(2));
        int size = Integer.parseInt(o.positional.get(3));
        int valueBytes = o.positional.size() > 4 ? Integer.parseInt(o.positional.get(4)) : 100;
        Map<String, Object> conf = base(bootstrap, extra);
        conf.put("key.serializer", StringSerializer.class.getName());
        conf.put("value.serializer", StringSerializer.class.getName());
        conf.put("transactional.id", txId);
        conf.put("linger.ms", "0");
        String value = "v".repeat(valueBytes);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(conf)) {
            producer.initTransactions();
            List<Long> commits = new ArrayList<>();
            long start = System.nanoTime(), end = start + (long) (seconds * 1e9);
            long txns = 0;
            while (System.nanoTime() < end) {
                producer.beginTransaction();
                for (int i = 0; i < size; i++) {
                    producer.send(new ProducerRecord<>(topic, null, value), (md, e) -> {
                        if (e != null) System.err.println("txn-bench: a send failed: " + e);
                    });
                }
                long t0 = System.nanoTime();
                // flush first: the Java client 4.3 on transactions v2 can send EndTxn ahead of a
                // record sent just before commitTransaction (its Sender reads "no incomplete
                // batches" before taking the transaction manager's lock, then finds the EndTxn
                // queued meanwhile); the coordinator then fails the empty commit (Kafka too) and
                // the producer is fenced for good. flush() sends the records before EndTxn exists.
                producer.flush();
                producer.commitTransaction();
                commits.add(System.nanoTime() - t0);
                txns++;
            }
            double elapsed = (System.nanoTime() - start) / 1e9;
            java.util.Collections.sort(commits);
            emit(obj("type", "txn-bench", "txns", txns, "records", txns * size, "seconds", elapsed,
                     "commit_p50_ms", commits.get(commits.size() / 2) / 1e6,
                     "commit_p99_ms", commits.get(Math.min(commits.size() - 1, (int) (commits.size() * 0.99))) / 1e6));
            producer.close(CALL_TIMEOUT);
        }
        emit(obj("type", "done"));
    }

    // ------------------------------------------------------------------------------- copy
    /**
     * The Java client's standard exactly-once loop. Per poll batch: beginTransaction, send, then
     * sendOffsetsToTransaction(offsets, consumer.groupMetadata()), commitTransaction. A fatal error
     * (fenced, out-of-order sequence, authorization, unsupported version) closes the producer and
     * starts a new one with the same transactional id; any other KafkaException aborts (or, if the
     * abort fails too, restarts the producer). Either way the consumer rewinds to the committed offsets.
     * Progress is the sum of the committed input offsets as this copier last knew them (from its own
     * commits, and re-read from the group at every rewind, so a commit that timed out but went through
     * is counted once its offsets are read back).
     */
    static void copy(String bootstrap, List<String> args, Map<String, String> extra) throws Exception {
        Opts o = new Opts(args, 5);
        String input = o.positional.get(0), output = o.positional.get(1), group = o.positional.get(2);
        String txId = o.positional.get(3);
        long n = Long.parseLong(o.positional.get(4));
        long timeoutMs = Long.parseLong(o.get("timeout-ms", "60000"));
        long minTxnMs = Long.parseLong(o.get("min-txn-ms", "0"));
        long deadline = System.currentTimeMillis() + timeoutMs;

        Map<String, Object> cconf = base(bootstrap, extra);
        cconf.put("key.deserializer", StringDeserializer.class.getName());
        cconf.put("value.deserializer", StringDeserializer.class.getName());
        cconf.put("group.id", group);
        cconf.put("isolation.level", "read_committed");
        cconf.put("enable.auto.commit", "false");
        cconf.put("auto.offset.reset", "earliest");
        cconf.keySet().removeIf(k -> k.startsWith("producer."));
        Map<String, Object> pconf = base(bootstrap, Collections.emptyMap());
        for (Map.Entry<String, String> e : extra.entrySet())   // --prop producer.k=v: producer only
            if (e.getKey().startsWith("producer.")) pconf.put(e.getKey().substring("producer.".length()), e.getValue());
        pconf.put("key.serializer", StringSerializer.class.getName());
        pconf.put("value.serializer", StringSerializer.class.getName());
        pconf.put("transactional.id", txId);

        Map<TopicPartition, Long> done = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        long[] stats = new long[3];   // aborts, restarts, transactions
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cconf);
        KafkaProducer<String, String> producer = null;
        try {
            consumer.subscribe(Collections.singletonList(input));
            producer = newTxnProducer(pconf, deadline);
            emit(obj("type", "initialized", "transactional_id", txId, "group", group));
            while (sum(done) < n) {
                if (System.currentTimeMillis() > deadline) {
                    emit(progress("timed_out", done, stats));
                    throw new IllegalStateException("copied " + sum(done) + " of " + n + " records within " + timeoutMs
                            + " ms (" + stats[0] + " aborts, " + stats[1] + " producer restarts); committed " + done);
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                long started = System.currentTimeMillis();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(output, r.partition(), r.key(), "out-" + r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet())
                        done.put(e.getKey(), e.getValue().offset());
                    stats[2]++;
                    emit(progress("progress", done, stats));
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException
                         | UnsupportedVersionException e) {
                    emit(obj("type", "error", "at_ms", System.currentTimeMillis(), "kind", "fatal", "error", e.toString()));
                    producer = restartProducer(producer, pconf, deadline, stats);
                    rewind(consumer, done, deadline);
                    emit(progress("progress", done, stats));
                } catch (KafkaException e) {
                    emit(obj("type", "error", "at_ms", System.currentTimeMillis(), "kind", "abortable", "error", e.toString()));
                    try {
                        producer.abortTransaction();
                        stats[0]++;
                    } catch (KafkaException abortFailed) {
                        emit(obj("type", "error", "at_ms", System.currentTimeMillis(), "kind", "abort failed", "error", abortFailed.toString()));
                        producer = restartProducer(producer, pconf, deadline, stats);
                    }
                    rewind(consumer, done, deadline);
                    emit(progress("progress", done, stats));
                }
                long left = minTxnMs - (System.currentTimeMillis() - started);
                if (left > 0) Thread.sleep(left);
            }
            emit(progress("done", done, stats));
            producer.close(CALL_TIMEOUT);
            consumer.close(CloseOptions.timeout(CALL_TIMEOUT));
            producer = null;
            consumer = null;
        } finally {
            if (producer != null) producer.close(Duration.ZERO);
            if (consumer != null) consumer.close(CloseOptions.timeout(Duration.ZERO));
        }
    }

    static Map<String, Object> progress(String type, Map<TopicPartition, Long> done, long[] stats) {
        Map<String, Object> parts = new TreeMap<>();
        for (Map.Entry<TopicPartition, Long> e : done.entrySet()) parts.put(Integer.toString(e.getKey().partition()), e.getValue());
        return obj("type", type, "at_ms", System.currentTimeMillis(), "committed", sum(done), "aborts", stats[0], "restarts", stats[1], "transactions", stats[2],
                "offsets", parts);
    }

    static long sum(Map<TopicPartition, Long> done) {
        long s = 0;
        for (long v : done.values()) s += v;
        return s;
    }

    /** A transactional producer, initialized; initTransactions is retried (as the API allows) until the deadline. */
    static KafkaProducer<String, String> newTxnProducer(Map<String, Object> conf, long deadline) {
        KafkaProducer<String, String> producer = new KafkaProducer<>(conf);
        while (true) {
            try {
                producer.initTransactions();
                return producer;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                if (System.currentTimeMillis() > deadline) {
                    producer.close(Duration.ZERO);
                    throw e;
                }
                emit(obj("type", "error", "at_ms", System.currentTimeMillis(), "kind", "init timeout", "error", e.toString()));
            }
        }
    }

    static KafkaProducer<String, String> restartProducer(KafkaProducer<String, String> old, Map<String, Object> conf,
                                                         long deadline, long[] stats) {
        old.close(Duration.ZERO);
        stats[1]++;
        return newTxnProducer(conf, deadline);
    }

    /** Seek every assigned partition to the group's committed offset (or the beginning), and record
     *  those offsets as the progress. Retried until the deadline (the coordinator may be failing over). */
    static void rewind(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> done, long deadline) {
        while (true) {
            try {
                Set<TopicPartition> assigned = consumer.assignment();
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, CALL_TIMEOUT);
                for (TopicPartition tp : assigned) {
                    OffsetAndMetadata c = committed.get(tp);
                    if (c == null) {
                        consumer.seekToBeginning(Collections.singletonList(tp));
                        done.remove(tp);
                    } else {
                        consumer.seek(tp, c.offset());
                        done.put(tp, c.offset());
                    }
                }
                return;
            } catch (KafkaException e) {
                if (System.currentTimeMillis() > deadline) throw e;
                emit(obj("type", "error", "at_ms", System.currentTimeMillis(), "kind", "rewind", "error", e.toString()));
            }
        }
    }

    // ------------------------------------------------------------------------------- plumbing
    static Map<String, Object> base(String bootstrap, Map<String, String> extra) {
        Map<String, Object> conf = new HashMap<>();
        conf.put("bootstrap.servers", bootstrap);
        conf.put("client.id", "kshim-java-" + ProcessHandle.current().pid());
        conf.putAll(extra);
        return conf;
    }

    static Map<String, Object> tpMap(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet())
            out.put(e.getKey().toString(), e.getValue() == null ? null : e.getValue().offset());
        return out;
    }

    /** Positional arguments, --name value options and the value-less flags below. */
    static final class Opts {
        static final Set<String> FLAGS = new HashSet<>(Arrays.asList("--until-end", "--assign"));
        final List<String> positional = new ArrayList<>();
        final Map<String, String> named = new HashMap<>();

        Opts(List<String> args, int positionals) {
            for (int i = 0; i < args.size(); i++) {
                String a = args.get(i);
                if (a.startsWith("--")) {
                    if (!FLAGS.contains(a) && i + 1 >= args.size()) throw new IllegalArgumentException(a + " wants a value");
                    String v = FLAGS.contains(a) ? "" : args.get(++i);
                    named.put(a.substring(2), v);
                } else {
                    positional.add(a);
                }
            }
            if (positional.size() != positionals)
                throw new IllegalArgumentException("expected " + positionals + " arguments after BOOTSTRAP, got " + positional);
        }

        boolean has(String k) { return named.containsKey(k); }
        String get(String k, String dflt) { return named.getOrDefault(k, dflt); }
    }

    static void startWatchdog(long ms) {
        Thread w = new Thread(() -> {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                return;
            }
            System.out.flush();
            System.err.println("kshim-client error: deadline of " + ms + " ms passed; thread dump follows");
            for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                System.err.println("thread " + e.getKey().getName());
                for (StackTraceElement s : e.getValue()) System.err.println("    at " + s);
            }
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "kshim-client-watchdog");
        w.setDaemon(true);
        w.start();
    }

    static void fail(String message) {
        System.out.flush();
        System.err.println("kshim-client error: " + message);
        System.err.flush();
        Runtime.getRuntime().halt(2);
    }

    // ------------------------------------------------------------------------------- JSON lines
    static synchronized void emit(Map<String, Object> o) {
        StringBuilder b = new StringBuilder();
        json(b, o);
        System.out.println(b);
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    @SuppressWarnings("unchecked")
    static void json(StringBuilder b, Object v) {
        if (v == null) {
            b.append("null");
        } else if (v instanceof String) {
            b.append('"');
            for (char c : ((String) v).toCharArray()) {
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20) b.append(String.format("\\u%04x", (int) c)); else b.append(c);
                }
            }
            b.append('"');
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof Map) {
            b.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) v).entrySet()) {
                if (!first) b.append(',');
                first = false;
                json(b, e.getKey());
                b.append(':');
                json(b, e.getValue());
            }
            b.append('}');
        } else if (v instanceof Collection) {
            b.append('[');
            boolean first = true;
            for (Object x : (Collection<Object>) v) {
                if (!first) b.append(',');
                first = false;
                json(b, x);
            }
            b.append(']');
        } else {
            json(b, v.toString());
        }
    }
}
