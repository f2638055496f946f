// The Java consumer's row of bench/consume.py: KafkaConsumer.poll() in a loop, iterating the
// records one by one and adding up the values' lengths, from offset 0 of partition 0 until
// the expected number of records has been read.
//
// Arguments: bootstrap topic records warm-up-records [key=value ...] (consumer settings over
// the defaults below). A warm-up reads the first warm-up-records records (so the JIT has
// compiled the fetch and iteration path, as in a long-running consumer) with a consumer that
// is closed before the timed one is made.
// Protocol with the parent (bench/measured_clients.py, run_measured): READY, wait for a line,
// the timed read, one JSON line {"seconds", "records", "bytes"}, wait for a line, close.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ConsumerBench {
    static final Duration POLL = Duration.ofSeconds(1);

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        // "topic" (partition 0) or "topic:N" (partitions 0..N-1, read from offset 0).
        String[] topicAndCount = args[1].split(":", 2);
        int count = topicAndCount.length > 1 ? Integer.parseInt(topicAndCount[1]) : 1;
        List<TopicPartition> partitions = new ArrayList<>();
        for (int p = 0; p < count; p++) {
            partitions.add(new TopicPartition(topicAndCount[0], p));
        }
        long records = Long.parseLong(args[2]);
        long warmUp = Math.min(records, Long.parseLong(args[3]));
        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        // Batched calls ask for up to 10,000 records in every client of the bench.
        config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        for (int i = 4; i < args.length; i++) {
            String[] setting = args[i].split("=", 2);
            config.put(setting[0], setting[1]);
        }
        BufferedReader parent =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        // The warm-up reads with a consumer of its own: seeking one consumer back would leave
        // its prefetch at the log end waiting out fetch.max.wait.ms on the broker.
        try (KafkaConsumer<byte[], byte[]> warming = new KafkaConsumer<>(config)) {
            warming.assign(partitions);
            for (TopicPartition partition : partitions) {
                warming.seek(partition, 0);
            }
            read(warming, warmUp);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            consumer.assign(partitions);
            for (TopicPartition partition : partitions) {
                consumer.seek(partition, 0);
            }
            System.out.println("READY");
            System.out.flush();
            parent.readLine();
            long start = System.nanoTime();
            long[] read = read(consumer, records);
            double seconds = (System.nanoTime() - start) / 1e9;
            if (read[0] != records) {
                throw new IllegalStateException("read " + read[0] + " records, expected " + records);
            }
            System.out.printf(
                    "{\"seconds\": %.9f, \"records\": %d, \"bytes\": %d}%n", seconds, read[0], read[1]);
            System.out.flush();
            parent.readLine();
        }
    }

    /** Reads records until {@code wanted} have arrived; returns {records, value bytes}. */
    static long[] read(KafkaConsumer<byte[], byte[]> consumer, long wanted) {
        long count = 0;
        long total = 0;
        while (count < wanted) {
            for (ConsumerRecord<byte[], byte[]> record : consumer.poll(POLL)) {
                byte[] value = record.value();
                total += value == null ? 0 : value.length;
                if (++count == wanted) {
                    break;
                }
            }
        }
        return new long[] {count, total};
    }
}
