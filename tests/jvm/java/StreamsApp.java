import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A small Kafka Streams topology for kayak's JVM-peer tests.
 *
 * <p>Input records are keyed by a record id with a word as value. Two outputs:
 * <ul>
 *   <li>{@code MAPPED}: a stateless map, key kept, value upper-cased;</li>
 *   <li>{@code COUNTS}: the input re-keyed by word (a repartition topic) and counted (a state
 *       store with its compacted changelog topic); each update is written as word → count
 *       (a decimal string, so any client reads it).</li>
 * </ul>
 *
 * <p>Usage: {@code java -cp <kafka jars> StreamsApp.java BOOTSTRAP APP_ID INPUT MAPPED COUNTS
 * STATE_DIR [KEY=VALUE ...]}; each {@code KEY=VALUE} is one more Streams property, over the
 * defaults below (e.g. {@code processing.guarantee=exactly_once_v2}). Prints {@code STATE
 * RUNNING} (and every other state change) on stdout; runs until SIGTERM, when it closes the
 * topology cleanly.
 */
public class StreamsApp {
    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println(
                    "usage: StreamsApp BOOTSTRAP APP_ID INPUT MAPPED COUNTS STATE_DIR [KEY=VALUE ...]");
            System.exit(2);
        }
        String bootstrap = args[0], appId = args[1], input = args[2];
        String mapped = args[3], counts = args[4], stateDir = args[5];

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Trim consumed repartition records soon (default: every 30 s).
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 500);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // A broker restart takes a few seconds: keep retrying instead of failing the thread.
        props.put(StreamsConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 1000);
        props.put(StreamsConfig.TASK_TIMEOUT_MS_CONFIG, 120_000);
        for (int i = 6; i < args.length; i++) {
            String[] property = args[i].split("=", 2);
            props.put(property[0], property[1]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> source =
                builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        source.mapValues(value -> value.toUpperCase())
                .to(mapped, Produced.with(Serdes.String(), Serdes.String()));
        source.map((id, word) -> KeyValue.pair(word, id))
                .groupByKey(Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.as("word-counts"))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(counts, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            System.out.println("UNCAUGHT " + error);
            System.out.flush();
            // Fail loudly: a broker defect must not hide behind a replaced thread.
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }
}
