import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Share groups' records with the Java client's KafkaShareConsumer, for compat_tests/test_share_records.py.
 * One JSON line per record or step (KshimClient's emit, with the step's name); every loop ends at
 * its deadline. Steps separated by "," run side by side (one JVM drives several consumers):
 *
 *   ShareRecords STEP ARGS... [, STEP ARGS...]
 *
 *   ShareRecords implicit BOOTSTRAP GROUP TOPIC MEMBERS RECORDS
 *       MEMBERS consumers (one thread each, implicit acknowledgement, max.poll.records 20) join;
 *       once the Admin client shows every member assigned, RECORDS records are produced in
 *       batches of 10 and the members poll until together they have RECORDS distinct offsets;
 *       then they commit (accepting their last records) and close. {"type":"got","member":i,"offset":o,"count":c}
 *   ShareRecords explicit BOOTSTRAP GROUP TOPIC LIMIT
 *       one consumer, explicit acknowledgement, over records 0-5 already in TOPIC: offset 0 is
 *       released at every delivery, 1 released once then accepted, 2-3 rejected, 4-5 accepted;
 *       once 0 came LIMIT times, it polls 2 s more (accepting anything) to show nothing returns.
 *       {"type":"got","offset":o,"count":c} per delivery
 *   ShareRecords hold BOOTSTRAP GROUP TOPIC N
 *       one consumer, explicit acknowledgement, polls until it holds N records, emits
 *       {"type":"held","offsets":[...],"counts":[...]} and waits, holding them, to be killed.
 *   ShareRecords read BOOTSTRAP GROUP TOPIC N
 *       one consumer, implicit acknowledgement, until it got N records; {"type":"got",...} each.
 */
public class ShareRecords {
    public static void main(String[] argv) throws Exception {
        KshimClient.startWatchdog(Long.parseLong(System.getProperty("deadline.ms", "55000")));
        // steps separated by "," run side by side, each in its own thread
        List<List<String>> steps = new ArrayList<>();
        steps.add(new ArrayList<>());
        for (String a : argv) {
            if (a.equals(",")) steps.add(new ArrayList<>());
            else steps.get(steps.size() - 1).add(a);
        }
        List<Thread> threads = new ArrayList<>();
        AtomicBoolean failed = new AtomicBoolean(false);
        for (List<String> step : steps) {
            Thread th = new Thread(() -> {
                try {
                    run(step);
                } catch (Throwable t) {
                    failed.set(true);
                    System.err.println("kshim-client error: " + step + ": " + t);
                    t.printStackTrace(System.err);
                }
            });
            th.start();
            threads.add(th);
        }
        for (Thread th : threads) th.join();
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(failed.get() ? 1 : 0);
    }

    static void run(List<String> a) throws Exception {
        String cmd = a.get(0), bootstrap = a.get(1), group = a.get(2), topic = a.get(3);
        switch (cmd) {
            case "implicit": implicit(bootstrap, group, topic, Integer.parseInt(a.get(4)), Integer.parseInt(a.get(5))); break;
            case "explicit": explicit(bootstrap, group, topic, Integer.parseInt(a.get(4))); break;
            case "hold": hold(bootstrap, group, topic, Integer.parseInt(a.get(4))); break;
            case "read": read(bootstrap, group, topic, Integer.parseInt(a.get(4))); break;
            default: throw new IllegalArgumentException("unknown step " + cmd);
        }
        KshimClient.emit(KshimClient.obj("type", "done", "step", cmd));
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String topic, boolean explicit,
                                                       int maxRecords) {
        Map<String, Object> props = new HashMap<>(KshimClient.base(bootstrap, new HashMap<>()));
        props.put("group.id", group);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        props.put("max.poll.records", String.valueOf(maxRecords));
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(props);
        c.subscribe(Collections.singletonList(topic));
        return c;
    }

    static int count(ConsumerRecord<String, String> r) {
        return r.deliveryCount().map(Short::intValue).orElse(-1);
    }

    static void implicit(String bootstrap, String group, String topic, int members, int records) throws Exception {
        Set<Long> seen = ConcurrentHashMap.newKeySet();
        AtomicBoolean produced = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 40_000;
        for (int i = 0; i < members; i++) {
            final int member = i;
            Thread th = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, topic, false, 20)) {
                    while (System.currentTimeMillis() < deadline && (!produced.get() || seen.size() < records)) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                            seen.add(r.offset());
                            KshimClient.emit(KshimClient.obj("type", "got", "step", "implicit", "member", member, "offset", r.offset(),
                                    "count", count(r)));
                        }
                    }
                    // close() sends only acknowledgements already made: in implicit mode the last poll's
                    // records are accepted by the next poll or a commit, else released at close and
                    // delivered again to a member still polling (a CI run saw 10 records come twice)
                    c.commitSync(Duration.ofSeconds(10));
                    c.close(Duration.ofSeconds(10));
                }
            });
            th.start();
            threads.add(th);
        }
        try (Admin admin = Admin.create(new HashMap<>(KshimClient.base(bootstrap, new HashMap<>())))) {
            ShareGroups.waitFor(admin, group, members);
        }
        Map<String, Object> pp = new HashMap<>(KshimClient.base(bootstrap, new HashMap<>()));
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < records; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, String.valueOf(i)));
                if (i % 10 == 9) p.flush();  // batches of 10: a fetch acquires whole batches, members share them
            }
            p.flush();
        }
        produced.set(true);
        for (Thread th : threads) th.join(45_000);
    }

    static void explicit(String bootstrap, String group, String topic, int limit) {
        Map<Long, Integer> deliveries = new TreeMap<>();
        long deadline = System.currentTimeMillis() + 40_000;
        long quietUntil = Long.MAX_VALUE;
        try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, topic, true, 500)) {
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    long o = r.offset();
                    int n = deliveries.merge(o, 1, Integer::sum);
                    KshimClient.emit(KshimClient.obj("type", "got", "step", "explicit", "offset", o, "count", count(r)));
                    AcknowledgeType how = quietUntil != Long.MAX_VALUE ? AcknowledgeType.ACCEPT
                            : o == 0 || o == 1 && n == 1 ? AcknowledgeType.RELEASE
                            : o == 2 || o == 3 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                    c.acknowledge(r, how);
                }
                c.commitSync(Duration.ofSeconds(10));
                if (quietUntil == Long.MAX_VALUE && deliveries.getOrDefault(0L, 0) >= limit
                        && deliveries.getOrDefault(1L, 0) >= 2 && deliveries.containsKey(5L))
                    quietUntil = System.currentTimeMillis() + 2000;  // nothing more may come now
            }
            c.close(Duration.ofSeconds(10));
        }
    }

    static void hold(String bootstrap, String group, String topic, int n) throws Exception {
        KafkaShareConsumer<String, String> c = consumer(bootstrap, group, topic, true, 500);
        List<Long> offsets = new ArrayList<>();
        List<Integer> counts = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (offsets.size() < n && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                offsets.add(r.offset());
                counts.add(count(r));
            }
        }
        KshimClient.emit(KshimClient.obj("type", "held", "offsets", offsets, "counts", counts));
        Thread.sleep(Long.MAX_VALUE);  // holding, never acknowledging: the test kills this JVM
    }

    static void read(String bootstrap, String group, String topic, int n) {
        int got = 0;
        long deadline = System.currentTimeMillis() + 40_000;
        try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, topic, false, 500)) {
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    got++;
                    KshimClient.emit(KshimClient.obj("type", "got", "step", "read", "offset", r.offset(), "count", count(r)));
                }
            }
            c.close(Duration.ofSeconds(10));
        }
    }
}
