import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileInputStream;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Runs each Admin client call kayak answers once, against the broker given, and prints one
 * JSON object per call on its own line: {"call": NAME, ...what it returned} or
 * {"call": NAME, "error": "ExceptionClass: message"}. The Python test asserts on the lines.
 *
 * Usage: java -cp KAFKA_JARS AdminCalls.java BOOTSTRAP CLIENT_PROPERTIES NAME_PREFIX
 */
public class AdminCalls {
    private static final ObjectMapper JSON = new ObjectMapper();

    interface Call {
        Map<String, Object> run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        Properties client = new Properties();
        client.put("bootstrap.servers", args[0]);
        try (InputStream in = new FileInputStream(args[1])) {
            client.load(in);
        }
        String prefix = args[2];
        String topic = prefix + "-topic";
        String group = prefix + "-group";
        String liveGroup = prefix + "-live";
        String user = prefix + "-user";
        TopicPartition p0 = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(client)) {
            run("describeCluster", () -> describeCluster(admin));
            run("createTopics", () -> createTopics(admin, topic, prefix + "-bad"));
            run("listTopics", () -> Map.of("names", new ArrayList<>(new java.util.TreeSet<>(
                admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get()))));
            run("createPartitions", () -> {
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
                return Map.of();
            });
            run("describeTopics", () -> describeTopic(admin, topic));
            run("describeConfigs", () -> describeConfigs(admin, topic));
            run("incrementalAlterConfigs", () -> alterConfigs(admin, topic));
            run("produce", () -> produce(client, topic));
            run("listOffsets", () -> listOffsets(admin, p0));
            run("deleteRecords", () -> Map.of("low_watermark", admin.deleteRecords(
                Map.of(p0, RecordsToDelete.beforeOffset(3))).lowWatermarks().get(p0).get()
                .lowWatermark()));
            run("alterConsumerGroupOffsets", () -> {
                admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(5, "m")))
                    .all().get();
                return Map.of();
            });
            run("listConsumerGroupOffsets", () -> groupOffsets(admin, group));
            run("liveGroup", () -> liveGroup(admin, client, topic, liveGroup));
            run("listGroups", () -> {
                List<String> groups = new ArrayList<>();
                for (GroupListing g : admin.listGroups().all().get()) {
                    groups.add(g.groupId());
                }
                return Map.of("groups", groups);
            });
            run("deleteConsumerGroupOffsets", () -> {
                admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get();
                return groupOffsets(admin, group);
            });
            run("deleteConsumerGroups", () -> {
                admin.deleteConsumerGroups(List.of(group, liveGroup)).all().get();
                return Map.of("groups", admin.listGroups().all().get().stream()
                    .map(GroupListing::groupId).filter(g -> g.startsWith(prefix)).toList());
            });
            run("createAcls", () -> createAcls(admin, topic));
            run("describeAcls", () -> Map.of("acls", acls(admin.describeAcls(
                aclsOf(topic)).values().get())));
            run("deleteAcls", () -> Map.of("deleted", acls(
                admin.deleteAcls(List.of(aclsOf(topic))).all().get())));
            run("alterUserScramCredentials", () -> {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                    "carol-secret"))).all().get();
                return scramUsers(admin, user);
            });
            run("deleteUserScramCredentials", () -> {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(
                    user, ScramMechanism.SCRAM_SHA_256))).all().get();
                return scramUsers(admin, user);
            });
            run("describeClientQuotas", () -> Map.of("entities", admin.describeClientQuotas(
                ClientQuotaFilter.all()).entities().get().size()));
            run("deleteTopics", () -> {
                admin.deleteTopics(List.of(topic)).all().get();
                return Map.of("exists", admin.listTopics().names().get().contains(topic));
            });
        }
    }

    private static void run(String name, Call call) throws Exception {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("call", name);
        try {
            line.putAll(call.run());
        } catch (ExecutionException e) {
            line.put("error", e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
        } catch (Exception e) {
            line.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }

    private static Map<String, Object> describeCluster(Admin admin) throws Exception {
        DescribeClusterResult cluster = admin.describeCluster(
            new DescribeClusterOptions().includeAuthorizedOperations(true));
        List<Map<String, Object>> nodes = new ArrayList<>();
        for (Node node : cluster.nodes().get()) {
            nodes.add(Map.of("id", node.id(), "host", node.host(), "port", node.port()));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("cluster_id", cluster.clusterId().get());
        out.put("controller", cluster.controller().get().id());
        out.put("nodes", nodes);
        out.put("operations", names(cluster.authorizedOperations().get()));
        return out;
    }

    private static Map<String, Object> createTopics(Admin admin, String topic, String bad)
            throws Exception {
        NewTopic good = new NewTopic(topic, 2, (short) 1)
            .configs(Map.of("retention.ms", "3600000", "segment.bytes", "1048576"));
        NewTopic refused = new NewTopic(bad, 1, (short) 1).configs(Map.of("retention.ms", "soon"));
        CreateTopicsResult result = admin.createTopics(List.of(good, refused));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("partitions", result.numPartitions(topic).get());
        out.put("replication_factor", result.replicationFactor(topic).get());
        out.put("retention_ms", result.config(topic).get().get("retention.ms").value());
        out.put("topic_id", result.topicId(topic).get().toString());
        try {
            result.values().get(bad).get();
            out.put("bad", "created");
        } catch (ExecutionException e) {
            out.put("bad", e.getCause().getClass().getSimpleName());
        }
        return out;
    }

    private static Map<String, Object> describeTopic(Admin admin, String topic) throws Exception {
        TopicDescription description = admin.describeTopics(List.of(topic),
            new DescribeTopicsOptions().includeAuthorizedOperations(true))
            .allTopicNames().get().get(topic);
        List<Map<String, Object>> partitions = new ArrayList<>();
        for (TopicPartitionInfo info : description.partitions()) {
            partitions.add(Map.of("partition", info.partition(), "leader", info.leader().id(),
                "replicas", info.replicas().size(), "isr", info.isr().size()));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("internal", description.isInternal());
        out.put("partitions", partitions);
        out.put("operations", names(description.authorizedOperations()));
        return out;
    }

    private static Map<String, Object> describeConfigs(Admin admin, String topic) throws Exception {
        ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "0");
        Map<ConfigResource, Config> configs =
            admin.describeConfigs(List.of(topicResource, broker)).all().get();
        ConfigEntry retention = configs.get(topicResource).get("retention.ms");
        ConfigEntry cleanup = configs.get(topicResource).get("cleanup.policy");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("retention_ms", List.of(retention.value(), retention.source().name()));
        out.put("cleanup_policy", List.of(cleanup.value(), cleanup.source().name()));
        out.put("topic_entries", configs.get(topicResource).entries().size());
        out.put("broker_id", configs.get(broker).get("broker.id").value());
        return out;
    }

    private static Map<String, Object> alterConfigs(Admin admin, String topic) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Collection<AlterConfigOp> ops = List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("segment.bytes", ""), AlterConfigOp.OpType.DELETE),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                AlterConfigOp.OpType.APPEND));
        admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        Map<String, Object> out = new LinkedHashMap<>();
        for (String name : List.of("retention.ms", "segment.bytes", "cleanup.policy")) {
            out.put(name, List.of(config.get(name).value(), config.get(name).source().name()));
        }
        // Leave the topic as it was for the records that follow (compact needs keys).
        admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
            new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        return out;
    }

    private static Map<String, Object> produce(Properties client, String topic) throws Exception {
        Properties props = new Properties();
        props.putAll(client);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 10; i++) {
                // Timestamps 1000..1009, except the 8th, the largest (for MAX_TIMESTAMP).
                long timestamp = i == 7 ? 5000 : 1000 + i;
                offsets.add(producer.send(new ProducerRecord<>(topic, 0, timestamp, "k" + i, "v" + i))
                    .get().offset());
            }
        }
        return Map.of("offsets", offsets);
    }

    private static Map<String, Object> listOffsets(Admin admin, TopicPartition tp) throws Exception {
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("max_timestamp", OffsetSpec.maxTimestamp());
        specs.put("for_timestamp_1005", OffsetSpec.forTimestamp(1005));
        specs.put("earliest_local", OffsetSpec.earliestLocal());
        specs.put("latest_tiered", OffsetSpec.latestTiered());
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
            try {
                ListOffsetsResult.ListOffsetsResultInfo info =
                    admin.listOffsets(Map.of(tp, spec.getValue())).partitionResult(tp).get();
                out.put(spec.getKey(), List.of(info.offset(), info.timestamp()));
            } catch (ExecutionException e) {
                out.put(spec.getKey(), e.getCause().getClass().getSimpleName());
            }
        }
        return out;
    }

    private static Map<String, Object> groupOffsets(Admin admin, String group) throws Exception {
        Map<String, Object> offsets = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry :
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().entrySet()) {
            if (entry.getValue() != null) {
                offsets.put(entry.getKey().toString(),
                    List.of(entry.getValue().offset(), entry.getValue().metadata()));
            }
        }
        return Map.of("offsets", offsets);
    }

    /** A static member joins, is described, then removed by the Admin client (LeaveGroup). */
    private static Map<String, Object> liveGroup(Admin admin, Properties client, String topic,
                                                 String group) throws Exception {
        Properties props = new Properties();
        props.putAll(client);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-1");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // The member is removed while the consumer still runs: no commit on close after that.
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            int records = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (records < 7 && System.currentTimeMillis() < deadline) {
                records += consumer.poll(Duration.ofMillis(200)).count();
            }
            consumer.commitSync();
            out.put("records", records);
            ConsumerGroupDescription described =
                admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            out.put("state", described.groupState().toString());
            out.put("assignor", described.partitionAssignor());
            out.put("members", described.members().size());
            out.put("assigned", described.members().iterator().next().assignment()
                .topicPartitions().size());
            admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                List.of(new MemberToRemove("static-1")))).all().get();
            out.put("members_after_removal",
                admin.describeConsumerGroups(List.of(group)).all().get().get(group).members().size());
        }
        return out;
    }

    private static AclBindingFilter aclsOf(String topic) {
        return new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.ANY),
            AccessControlEntryFilter.ANY);
    }

    private static Map<String, Object> createAcls(Admin admin, String topic) throws Exception {
        admin.createAcls(List.of(
            new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                new AccessControlEntry("User:app", "*", AclOperation.READ, AclPermissionType.ALLOW)),
            new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.PREFIXED),
                new AccessControlEntry("User:app", "*", AclOperation.WRITE, AclPermissionType.DENY))
        )).all().get();
        return Map.of();
    }

    private static List<String> acls(Collection<AclBinding> bindings) {
        List<String> out = new ArrayList<>();
        for (AclBinding b : bindings) {
            out.add(b.pattern().patternType() + " " + b.entry().principal() + " "
                + b.entry().operation() + " " + b.entry().permissionType());
        }
        out.sort(null);
        return out;
    }

    private static Map<String, Object> scramUsers(Admin admin, String user) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            UserScramCredentialsDescription description =
                admin.describeUserScramCredentials(List.of(user)).description(user).get();
            List<String> credentials = new ArrayList<>();
            for (ScramCredentialInfo info : description.credentialInfos()) {
                credentials.add(info.mechanism() + " " + info.iterations());
            }
            out.put("credentials", credentials);
        } catch (ExecutionException e) {
            out.put("credentials", e.getCause().getClass().getSimpleName());
        }
        return out;
    }

    private static List<String> names(Set<AclOperation> operations) {
        List<String> out = new ArrayList<>();
        if (operations != null) {
            for (AclOperation op : operations) {
                out.add(op.name());
            }
        }
        out.sort(null);
        return out;
    }
}
