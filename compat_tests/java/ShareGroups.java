import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Share groups' membership with the Java client, for compat_tests/test_share_groups.py:
 *
 *   ShareGroups BOOTSTRAP GROUP TOPIC MEMBERS
 *
 * starts MEMBERS KafkaShareConsumers (one thread each, polling) subscribed to TOPIC, and with the
 * Admin client: waits (bounded) until describeShareGroups shows MEMBERS members that all have an
 * assignment and emits the description; lists the share groups (listGroups forShareGroups); sets
 * share.auto.offset.reset and share.record.lock.duration.ms on the GROUP config resource with
 * incrementalAlterConfigs and emits describeConfigs of it; closes the consumers and waits until the
 * group is Empty. One JSON line per step (KshimClient's emit); a failed step ends the program.
 */
public class ShareGroups {
    static final long T = 20_000;
    static final TimeUnit MS = TimeUnit.MILLISECONDS;

    public static void main(String[] argv) throws Exception {
        KshimClient.startWatchdog(80_000);
        String bootstrap = argv[0], group = argv[1], topic = argv[2];
        int members = Integer.parseInt(argv[3]);
        AtomicBoolean stop = new AtomicBoolean(false);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Map<String, Object> props = new HashMap<>(KshimClient.base(bootstrap, new HashMap<>()));
            props.put("group.id", group);
            props.put("client.id", "share-" + i);
            props.put("key.deserializer", StringDeserializer.class.getName());
            props.put("value.deserializer", StringDeserializer.class.getName());
            Thread th = new Thread(() -> {
                try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(props)) {
                    c.subscribe(Collections.singletonList(topic));
                    while (!stop.get()) {
                        try {
                            c.poll(Duration.ofMillis(200));
                        } catch (RuntimeException e) {  // records are the data side's: membership is what is checked here
                            System.err.println("poll: " + e);
                            Thread.sleep(200);
                        }
                    }
                    c.close(Duration.ofSeconds(10));
                } catch (Exception e) {
                    System.err.println("share consumer: " + e);
                }
            });
            th.setDaemon(true);
            th.start();
            threads.add(th);
        }
        try (Admin admin = Admin.create(new HashMap<>(KshimClient.base(bootstrap, new HashMap<>())))) {
            ShareGroupDescription d = waitFor(admin, group, members);
            KshimClient.emit(describe(d));

            List<Object> listed = new ArrayList<>();
            for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get(T, MS))
                listed.add(KshimClient.obj("group_id", g.groupId(), "type", g.type().map(Object::toString).orElse(null),
                        "state", g.groupState().map(Object::toString).orElse(null), "protocol", g.protocol()));
            KshimClient.emit(KshimClient.obj("type", "listed", "groups", listed));

            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            Map<ConfigResource, java.util.Collection<AlterConfigOp>> ops = new HashMap<>();
            ops.put(res, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("share.record.lock.duration.ms", "20000"), AlterConfigOp.OpType.SET)));
            admin.incrementalAlterConfigs(ops).all().get(T, MS);
            Config c = admin.describeConfigs(Collections.singletonList(res)).all().get(T, MS).get(res);
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : c.entries())
                entries.put(e.name(), KshimClient.obj("value", e.value(), "source", e.source().toString()));
            KshimClient.emit(KshimClient.obj("type", "configs", "entries", entries));
            try {
                admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                        new ConfigEntry("share.session.timeout.ms", "1000"), AlterConfigOp.OpType.SET)))).all().get(T, MS);
                KshimClient.emit(KshimClient.obj("type", "bad-config", "error", null));
            } catch (java.util.concurrent.ExecutionException e) {
                KshimClient.emit(KshimClient.obj("type", "bad-config", "error", e.getCause().getClass().getSimpleName()));
            }

            stop.set(true);
            for (Thread th : threads) th.join(15_000);
            KshimClient.emit(describe(waitFor(admin, group, 0)));
        }
        KshimClient.emit(KshimClient.obj("type", "done"));
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    /** The group once it has `members` members, each with a non-empty assignment at the group's
     *  assignment epoch (bounded wait: members take a new assignment at their next heartbeat). */
    static ShareGroupDescription waitFor(Admin admin, String group, int members) throws Exception {
        long deadline = System.currentTimeMillis() + 50_000;
        ShareGroupDescription d = null;
        while (System.currentTimeMillis() < deadline) {
            try {
                d = admin.describeShareGroups(Collections.singletonList(group)).all().get(T, MS).get(group);
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException)) throw e;
                Thread.sleep(200);  // no member has joined yet
                continue;
            }
            final int target = d.targetAssignmentEpoch();  // every member caught up with the last assignment
            boolean assigned = d.members().stream().allMatch(
                    m -> !m.assignment().topicPartitions().isEmpty() && m.memberEpoch() == target);
            if (d.members().size() == members && assigned) return d;
            Thread.sleep(200);
        }
        throw new IllegalStateException("share group " + group + " never had " + members + " assigned members: " + d);
    }

    static Map<String, Object> describe(ShareGroupDescription d) {
        List<Object> ms = new ArrayList<>();
        for (ShareMemberDescription m : d.members()) {
            List<Object> tps = new ArrayList<>();
            for (TopicPartition tp : m.assignment().topicPartitions())
                tps.add(KshimClient.obj("topic", tp.topic(), "partition", tp.partition()));
            ms.add(KshimClient.obj("member_id", m.consumerId(), "client_id", m.clientId(), "epoch", m.memberEpoch(),
                    "assignment", tps));
        }
        return KshimClient.obj("type", "described", "group_id", d.groupId(), "state", d.groupState().toString(),
                "group_epoch", d.groupEpoch(), "assignment_epoch", d.targetAssignmentEpoch(), "members", ms);
    }
}
