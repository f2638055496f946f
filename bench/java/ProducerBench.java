// The Java producer's row of bench/produce.py: groups of values sent one at a time with
// KafkaProducer.send() and a delivery callback per record, each group flushed (acknowledged)
// before the next, exactly as the Python clients are driven.
//
// Arguments: bootstrap topic messages size linger.ms batch.size max.request.size compression
// warm-up-groups. Protocol with the parent (bench/measured_clients.py, run_measured): after the
// warm-up it prints READY and waits for a line on stdin; it then times the measured groups,
// prints one JSON line {"seconds", "messages", "warmup"} and waits for another line before
// closing, so that the parent reads its CPU time from /proc while it is idle.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ProducerBench {
    static final int GROUP = 1000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int messages = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ProducerConfig.ACKS_CONFIG, "1");
        config.put(ProducerConfig.LINGER_MS_CONFIG, args[4]);
        config.put(ProducerConfig.BATCH_SIZE_CONFIG, args[5]);
        config.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, args[6]);
        config.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args[7]);
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        int warmUpGroups = Integer.parseInt(args[8]);

        // Distinct arrays per message, as an application would have; built before the clock.
        List<byte[][]> groups = new ArrayList<>();
        for (int g = 0; g < Math.max(1, messages / GROUP); g++) {
            byte[][] group = new byte[GROUP][];
            for (int i = 0; i < GROUP; i++) {
                group[i] = new byte[size];
            }
            groups.add(group);
        }
        AtomicLong acknowledged = new AtomicLong();
        AtomicReference<Exception> failure = new AtomicReference<>();
        Callback onDelivery = (metadata, exception) -> {
            if (exception != null) {
                failure.compareAndSet(null, exception);
            } else {
                acknowledged.incrementAndGet();
            }
        };
        BufferedReader parent =
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            // The warm-up: connect, learn the leader, and let the JIT compile the send path.
            for (int g = 0; g < warmUpGroups; g++) {
                sendGroup(producer, topic, groups.get(g % groups.size()), onDelivery);
            }
            check(failure, acknowledged, (long) warmUpGroups * GROUP);
            acknowledged.set(0);
            System.out.println("READY");
            System.out.flush();
            parent.readLine();
            long start = System.nanoTime();
            for (byte[][] group : groups) {
                sendGroup(producer, topic, group, onDelivery);
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            long sent = (long) groups.size() * GROUP;
            check(failure, acknowledged, sent);
            System.out.printf(
                    "{\"seconds\": %.9f, \"messages\": %d, \"warmup\": %d}%n",
                    seconds, sent, (long) warmUpGroups * GROUP);
            System.out.flush();
            parent.readLine();
        }
    }

    static void sendGroup(
            KafkaProducer<byte[], byte[]> producer, String topic, byte[][] group, Callback done) {
        for (byte[] value : group) {
            producer.send(new ProducerRecord<>(topic, value), done);
        }
        producer.flush();
    }

    static void check(AtomicReference<Exception> failure, AtomicLong acknowledged, long expected) {
        if (failure.get() != null) {
            throw new IllegalStateException("a send failed", failure.get());
        }
        if (acknowledged.get() != expected) {
            throw new IllegalStateException(
                    acknowledged.get() + " acknowledged, " + expected + " sent");
        }
    }
}
