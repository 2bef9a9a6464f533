import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterPartitionReassignmentsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListConfigResourcesOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.SupportedVersionRange;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java Admin client's operations and administration calls, for compat_tests/test_admin_ops.py:
 * `AdminOps BOOTSTRAP OP ARGS [, OP ARGS]...`, one JSON line per operation (KshimClient's emit).
 * A failed operation emits {"type": "error", "op": OP, "error": the exception's simple class name}
 * and the next one runs: the tests check the error a Java user would get.
 */
public class AdminOps {
    static final long T = 30_000;
    static final TimeUnit MS = TimeUnit.MILLISECONDS;

    public static void main(String[] argv) throws Exception {
        KshimClient.startWatchdog(55_000);
        String bootstrap = argv[0];
        List<List<String>> ops = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (int i = 1; i < argv.length; i++) {
            if (argv[i].equals(",")) { if (!cur.isEmpty()) ops.add(cur); cur = new ArrayList<>(); }
            else cur.add(argv[i]);
        }
        if (!cur.isEmpty()) ops.add(cur);
        try (Admin admin = Admin.create(new HashMap<>(KshimClient.base(bootstrap, new HashMap<>())))) {
            for (List<String> op : ops) {
                try {
                    run(admin, op.get(0), op.subList(1, op.size()));
                } catch (ExecutionException e) {
                    Throwable c = e.getCause() == null ? e : e.getCause();
                    KshimClient.emit(KshimClient.obj("type", "error", "op", op.get(0), "error", c.getClass().getSimpleName(),
                            "message", String.valueOf(c.getMessage())));
                }
            }
        }
        KshimClient.emit(KshimClient.obj("type", "done"));
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    static TopicPartition tp(String s) {
        int i = s.lastIndexOf(':');
        return new TopicPartition(s.substring(0, i), Integer.parseInt(s.substring(i + 1)));
    }

    static void run(Admin admin, String op, List<String> a) throws Exception {
        switch (op) {
            case "create-partitions": {  // TOPIC TOTAL [B:B:B per new partition]...
                NewPartitions np;
                if (a.size() > 2) {
                    List<List<Integer>> assignments = new ArrayList<>();
                    for (String s : a.subList(2, a.size())) {
                        List<Integer> replicas = new ArrayList<>();
                        for (String b : s.split(":")) replicas.add(Integer.parseInt(b));
                        assignments.add(replicas);
                    }
                    np = NewPartitions.increaseTo(Integer.parseInt(a.get(1)), assignments);
                } else {
                    np = NewPartitions.increaseTo(Integer.parseInt(a.get(1)));
                }
                admin.createPartitions(Map.of(a.get(0), np)).all().get(T, MS);
                KshimClient.emit(KshimClient.obj("type", "created-partitions", "topic", a.get(0)));
                break;
            }
            case "elect": {  // preferred|unclean TOPIC:PART... (none: every partition)
                ElectionType type = a.get(0).equals("unclean") ? ElectionType.UNCLEAN : ElectionType.PREFERRED;
                Set<TopicPartition> asked = null;
                if (a.size() > 1) {
                    asked = new HashSet<>();
                    for (String s : a.subList(1, a.size())) asked.add(tp(s));
                }
                Map<TopicPartition, java.util.Optional<Throwable>> out = admin.electLeaders(type, asked).partitions().get(T, MS);
                Map<String, Object> results = new TreeMap<>();
                for (Map.Entry<TopicPartition, java.util.Optional<Throwable>> e : out.entrySet())
                    results.put(e.getKey().toString(), e.getValue().map(x -> x.getClass().getSimpleName()).orElse(null));
                KshimClient.emit(KshimClient.obj("type", "elected", "results", results));
                break;
            }
            case "describe-topics": {  // LIMIT TOPIC... (LIMIT: partitions per DescribeTopicPartitions response)
                DescribeTopicsOptions options = new DescribeTopicsOptions().partitionSizeLimitPerResponse(Integer.parseInt(a.get(0)));
                Map<String, TopicDescription> ds = admin.describeTopics(a.subList(1, a.size()), options).allTopicNames().get(T, MS);
                for (String name : a.subList(1, a.size())) {
                    TopicDescription d = ds.get(name);
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : d.partitions())
                        parts.add(KshimClient.obj("partition", p.partition(), "leader", p.leader() == null ? null : p.leader().id(),
                                "replicas", KshimClient.ids(p.replicas()), "isr", KshimClient.ids(p.isr())));
                    KshimClient.emit(KshimClient.obj("type", "topic", "name", d.name(), "topic_id", String.valueOf(d.topicId()),
                            "partitions", parts));
                }
                break;
            }
            case "log-dirs": {  // BROKER...
                List<Integer> brokers = new ArrayList<>();
                for (String s : a) brokers.add(Integer.parseInt(s));
                Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(brokers).allDescriptions().get(T, MS);
                for (Map.Entry<Integer, Map<String, LogDirDescription>> b : all.entrySet())
                    for (Map.Entry<String, LogDirDescription> d : b.getValue().entrySet()) {
                        Map<String, Object> replicas = new TreeMap<>();
                        for (Map.Entry<TopicPartition, ReplicaInfo> r : d.getValue().replicaInfos().entrySet())
                            replicas.put(r.getKey().toString(), KshimClient.obj("size", r.getValue().size(),
                                    "offset_lag", r.getValue().offsetLag(), "future", r.getValue().isFuture()));
                        LogDirDescription dd = d.getValue();
                        KshimClient.emit(KshimClient.obj("type", "log-dir", "broker", b.getKey(), "path", d.getKey(),
                                "error", dd.error() == null ? null : dd.error().getClass().getSimpleName(),
                                "total_bytes", dd.totalBytes().isPresent() ? dd.totalBytes().getAsLong() : null,
                                "usable_bytes", dd.usableBytes().isPresent() ? dd.usableBytes().getAsLong() : null,
                                "replicas", replicas));
                    }
                break;
            }
            case "alter-log-dirs": {  // BROKER PATH TOPIC:PART...
                int broker = Integer.parseInt(a.get(0));
                Map<TopicPartitionReplica, String> moves = new HashMap<>();
                for (String s : a.subList(2, a.size())) {
                    TopicPartition p = tp(s);
                    moves.put(new TopicPartitionReplica(p.topic(), p.partition(), broker), a.get(1));
                }
                for (Map.Entry<TopicPartitionReplica, KafkaFuture<Void>> e : admin.alterReplicaLogDirs(moves).values().entrySet()) {
                    String error = null;
                    try { e.getValue().get(T, MS); }
                    catch (ExecutionException x) { error = x.getCause().getClass().getSimpleName(); }
                    KshimClient.emit(KshimClient.obj("type", "alter-log-dir", "replica",
                            e.getKey().topic() + "-" + e.getKey().partition(), "error", error));
                }
                break;
            }
            case "replica-log-dirs": {  // BROKER TOPIC:PART...
                int broker = Integer.parseInt(a.get(0));
                List<TopicPartitionReplica> asked = new ArrayList<>();
                for (String s : a.subList(1, a.size())) {
                    TopicPartition p = tp(s);
                    asked.add(new TopicPartitionReplica(p.topic(), p.partition(), broker));
                }
                for (Map.Entry<TopicPartitionReplica, ReplicaLogDirInfo> e : admin.describeReplicaLogDirs(asked).all().get(T, MS).entrySet()) {
                    ReplicaLogDirInfo i = e.getValue();
                    KshimClient.emit(KshimClient.obj("type", "replica-log-dir", "replica",
                            e.getKey().topic() + "-" + e.getKey().partition(), "current", i.getCurrentReplicaLogDir(),
                            "current_lag", i.getCurrentReplicaOffsetLag(), "future", i.getFutureReplicaLogDir(),
                            "future_lag", i.getFutureReplicaOffsetLag()));
                }
                break;
            }
            case "quorum": {
                QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(T, MS);
                List<Object> voters = new ArrayList<>();
                for (QuorumInfo.ReplicaState r : q.voters())
                    voters.add(KshimClient.obj("id", r.replicaId(), "log_end_offset", r.logEndOffset(),
                            "last_caught_up", r.lastCaughtUpTimestamp().isPresent() ? r.lastCaughtUpTimestamp().getAsLong() : null));
                KshimClient.emit(KshimClient.obj("type", "quorum", "leader", q.leaderId(), "epoch", q.leaderEpoch(),
                        "high_watermark", q.highWatermark(), "voters", voters, "observers", q.observers().size(),
                        "nodes", q.nodes().size()));
                break;
            }
            case "features": {
                FeatureMetadata f = admin.describeFeatures().featureMetadata().get(T, MS);
                Map<String, Object> supported = new TreeMap<>();
                for (Map.Entry<String, SupportedVersionRange> e : f.supportedFeatures().entrySet())
                    supported.put(e.getKey(), List.of((int) e.getValue().minVersion(), (int) e.getValue().maxVersion()));
                Map<String, Object> finalized = new TreeMap<>();
                for (Map.Entry<String, FinalizedVersionRange> e : f.finalizedFeatures().entrySet())
                    finalized.put(e.getKey(), List.of((int) e.getValue().minVersionLevel(), (int) e.getValue().maxVersionLevel()));
                KshimClient.emit(KshimClient.obj("type", "features", "supported", supported, "finalized", finalized,
                        "epoch", f.finalizedFeaturesEpoch().orElse(null)));
                break;
            }
            case "update-feature": {  // NAME LEVEL upgrade|safe-downgrade|unsafe-downgrade [validate]
                FeatureUpdate.UpgradeType type = FeatureUpdate.UpgradeType.valueOf(a.get(2).toUpperCase().replace('-', '_'));
                UpdateFeaturesOptions options = new UpdateFeaturesOptions().validateOnly(a.size() > 3);
                admin.updateFeatures(Map.of(a.get(0), new FeatureUpdate(Short.parseShort(a.get(1)), type)), options).all().get(T, MS);
                KshimClient.emit(KshimClient.obj("type", "updated-feature", "name", a.get(0)));
                break;
            }
            case "list-config-resources": {  // [TYPE...]
                Set<ConfigResource.Type> types = new HashSet<>();
                for (String s : a) types.add(ConfigResource.Type.valueOf(s));
                List<Object> found = new ArrayList<>();
                for (ConfigResource r : admin.listConfigResources(types, new ListConfigResourcesOptions()).all().get(T, MS))
                    found.add(r.type() + ":" + r.name());
                java.util.Collections.sort((List) found);
                KshimClient.emit(KshimClient.obj("type", "config-resources", "resources", found));
                break;
            }
            case "unregister": {  // BROKER
                admin.unregisterBroker(Integer.parseInt(a.get(0))).all().get(T, MS);
                KshimClient.emit(KshimClient.obj("type", "unregistered", "broker", Integer.parseInt(a.get(0))));
                break;
            }
            case "reassign": {  // [keep-rf] TOPIC:PART=B:B... or TOPIC:PART=cancel, one result per partition
                AlterPartitionReassignmentsOptions options = new AlterPartitionReassignmentsOptions();
                List<String> specs = a;
                if (!a.isEmpty() && a.get(0).equals("keep-rf")) {
                    options.allowReplicationFactorChange(false);
                    specs = a.subList(1, a.size());
                }
                Map<TopicPartition, java.util.Optional<NewPartitionReassignment>> asked = new HashMap<>();
                for (String s : specs) {
                    String[] kv = s.split("=");
                    if (kv[1].equals("cancel")) {
                        asked.put(tp(kv[0]), java.util.Optional.empty());
                    } else {
                        List<Integer> replicas = new ArrayList<>();
                        for (String b : kv[1].split(":")) replicas.add(Integer.parseInt(b));
                        asked.put(tp(kv[0]), java.util.Optional.of(new NewPartitionReassignment(replicas)));
                    }
                }
                Map<String, Object> results = new TreeMap<>();
                for (Map.Entry<TopicPartition, org.apache.kafka.common.KafkaFuture<Void>> e :
                        admin.alterPartitionReassignments(asked, options).values().entrySet()) {
                    try {
                        e.getValue().get(T, MS);
                        results.put(e.getKey().toString(), null);
                    } catch (ExecutionException x) {
                        results.put(e.getKey().toString(), x.getCause().getClass().getSimpleName());
                    }
                }
                KshimClient.emit(KshimClient.obj("type", "reassigned", "results", results));
                break;
            }
            case "list-reassignments": {  // [TOPIC:PART...] (none: every partition)
                Map<TopicPartition, PartitionReassignment> found;
                if (a.isEmpty()) {
                    found = admin.listPartitionReassignments().reassignments().get(T, MS);
                } else {
                    Set<TopicPartition> asked = new HashSet<>();
                    for (String s : a) asked.add(tp(s));
                    found = admin.listPartitionReassignments(asked).reassignments().get(T, MS);
                }
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<TopicPartition, PartitionReassignment> e : found.entrySet())
                    out.put(e.getKey().toString(), KshimClient.obj("replicas", e.getValue().replicas(),
                            "adding", e.getValue().addingReplicas(), "removing", e.getValue().removingReplicas()));
                KshimClient.emit(KshimClient.obj("type", "reassignments", "reassignments", out));
                break;
            }
            default:
                KshimClient.fail("unknown admin operation " + op);
        }
    }
}
