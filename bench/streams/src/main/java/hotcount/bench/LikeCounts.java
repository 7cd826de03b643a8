package hotcount.bench;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams baseline for hotcount's benchmark: likes.raw in, the running like count of
 * every post out, exactly once.
 *
 * <p>The issue asks for {@code groupByKey().count()}; unlikes subtract, so the equivalent is a
 * sum: every valid event becomes (post_id, +1 or -1), re-keyed by post id (Streams writes the
 * repartition topic that plays the role of hotcount's likes.partials), then
 * {@code groupByKey().reduce(Long::sum)} keeps the count in a state store (with its changelog
 * topic) and forwards the new totals to the output topic. Invalid events are dropped; they are
 * judged by the contract's rules as far as Jackson's strict mode can say (see {@link #delta}).
 *
 * <p>Usage: {@code LikeCounts BROKERS RAW_TOPIC OUT_TOPIC APPLICATION_ID [key=value]...}; the
 * extra pairs override any Streams/client property (e.g. {@code num.stream.threads=2}).
 */
public final class LikeCounts {
  static final int MAX_EVENT_BYTES = 4096;
  static final int MAX_POST_ID_BYTES = 256;

  private static final JsonFactory JSON =
      JsonFactory.builder()
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .streamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(64).build())
          .build();

  private LikeCounts() {}

  /** A valid event's post id and +1/-1, or null for an event hotcount would dead-letter. */
  static KeyValue<String, Long> delta(byte[] value) {
    if (value == null || value.length == 0 || value.length > MAX_EVENT_BYTES) {
      return null;
    }
    String post = null;
    long delta = 1;
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      JsonToken t;
      while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
        String name = p.currentName();
        t = p.nextToken();
        switch (name) {
          case "post_id":
            if (t == JsonToken.VALUE_STRING) {
              post = p.getText();
              if (post.isEmpty() || !printable(post)) {
                return null;
              }
            } else if (t == JsonToken.VALUE_NUMBER_INT) {
              post = p.getText(); // the literal: 42 and "42" are one post
              if (post.startsWith("-")) {
                return null;
              }
            } else {
              return null;
            }
            if (post.getBytes(StandardCharsets.UTF_8).length > MAX_POST_ID_BYTES) {
              return null;
            }
            break;
          case "user_id":
            if (t != JsonToken.VALUE_STRING && t != JsonToken.VALUE_NUMBER_INT) {
              return null;
            }
            break;
          case "op":
            if (t != JsonToken.VALUE_STRING) {
              return null;
            }
            String op = p.getText();
            if (op.equals("like")) {
              delta = 1;
            } else if (op.equals("unlike")) {
              delta = -1;
            } else {
              return null;
            }
            break;
          case "ts":
            if (t != JsonToken.VALUE_NUMBER_INT
                || p.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
              return null;
            }
            break;
          case "event_id":
            if (t != JsonToken.VALUE_STRING) {
              return null;
            }
            break;
          default:
            p.skipChildren();
        }
      }
      if (t != JsonToken.END_OBJECT || p.nextToken() != null || post == null) {
        return null; // truncated, trailing garbage or no post id
      }
    } catch (IOException | RuntimeException e) {
      return null; // not JSON, bad UTF-8, duplicate key, too deep
    }
    return KeyValue.pair(post, delta);
  }

  private static boolean printable(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < 0x20 || c == 0x7f) {
        return false;
      }
    }
    return true;
  }

  static Topology topology(String rawTopic, String outTopic) {
    StreamsBuilder b = new StreamsBuilder();
    b.stream(rawTopic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .flatMap(
            (key, value) -> {
              KeyValue<String, Long> kv = delta(value);
              return kv == null
                  ? Collections.<KeyValue<String, Long>>emptyList()
                  : List.of(kv);
            })
        .groupByKey(Grouped.with("by-post", Serdes.String(), Serdes.Long()))
        .reduce(
            Long::sum,
            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("like-counts")
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.Long()))
        .toStream()
        .to(outTopic, Produced.with(Serdes.String(), Serdes.Long()));
    return b.build();
  }

  private static long cpuMillis() {
    java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
    if (os instanceof com.sun.management.OperatingSystemMXBean) {
      return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() / 1_000_000;
    }
    return -1;
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length < 4) {
      System.err.println(
          "usage: LikeCounts BROKERS RAW_TOPIC OUT_TOPIC APPLICATION_ID [key=value]...");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    // hotcount flushes its windows every flush.ms=1000: the same cadence for the commits
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "1000");
    for (int i = 4; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("LikeCounts: not key=value: " + args[i]);
        System.exit(2);
      }
      props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }

    KafkaStreams streams = new KafkaStreams(topology(args[1], args[2]), props);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          // The runner reads this line to split JVM start-up and rebalance from processing.
          System.err.printf(
              "hc-streams: state %s cpu_ms=%d uptime_ms=%d%n",
              now, cpuMillis(), ManagementFactory.getRuntimeMXBean().getUptime());
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            done.countDown();
          }
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  done.countDown();
                }));
    streams.start();
    done.await();
    streams.close(Duration.ofSeconds(30));
    System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
  }
}
