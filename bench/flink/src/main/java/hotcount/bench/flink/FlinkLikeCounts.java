package hotcount.bench.flink;

import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.annotation.FunctionHint;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.functions.TableFunction;
import org.apache.flink.types.Row;

/**
 * The Flink baseline for hotcount's benchmark: the raw topic in, the like count of every post
 * out to an upsert-kafka topic, exactly once, with Flink SQL's MiniBatch and local-global
 * (two-phase) aggregation.
 *
 * <p>The job is {@code INSERT INTO counts SELECT post_id, SUM(delta) FROM raw, LATERAL
 * TABLE(like_delta(payload)) GROUP BY post_id}: the raw value is read as bytes and judged by
 * {@link LikeEvent} (the Streams baseline's rules), an invalid event yields no row. With
 * MiniBatch on and {@code table.optimizer.agg-phase-strategy=TWO_PHASE} the planner splits the
 * SUM into a LocalGroupAggregate before the hash exchange on post_id (one partial sum per post
 * per mini-batch and subtask: hotcount's stage 1) and a GlobalGroupAggregate after it (stage 2).
 * The job prints its optimized plan so that the runner can check that both phases are there.
 *
 * <p>It runs in a MiniCluster inside this JVM (a local environment; no cluster scripts). The
 * source is bounded at the end offsets seen at start-up ({@code scan.bounded.mode =
 * latest-offset}): the job ends after its final checkpoint has committed the sink's last
 * transaction, and the JVM exits.
 *
 * <p>Usage: {@code FlinkLikeCounts key=value...}; keys: brokers, raw, out, group, txn-prefix,
 * checkpoint-dir (required), parallelism (2), checkpoint-ms (1000), minibatch-latency-ms (1000),
 * minibatch-size (5000), txn-timeout-ms (60000).
 */
public final class FlinkLikeCounts {
  private FlinkLikeCounts() {}

  // The runner reads these lines: CPU at the first event splits start-up from processing.
  private static final AtomicBoolean FIRST = new AtomicBoolean();

  static long cpuMillis() {
    java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
    if (os instanceof com.sun.management.OperatingSystemMXBean) {
      return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() / 1_000_000;
    }
    return -1;
  }

  static void mark(String what) {
    System.err.printf(
        "hc-flink: %s cpu_ms=%d uptime_ms=%d%n",
        what, cpuMillis(), ManagementFactory.getRuntimeMXBean().getUptime());
  }

  /** One row (post_id, +1|-1) per valid event, none for an invalid one. */
  @FunctionHint(output = @DataTypeHint("ROW<post_id STRING, delta BIGINT>"))
  public static final class LikeDelta extends TableFunction<Row> {
    public void eval(byte[] value) {
      if (!FIRST.get() && FIRST.compareAndSet(false, true)) {
        mark("first event");
      }
      LikeEvent e = LikeEvent.parse(value);
      if (e != null) {
        collect(Row.of(e.post, e.delta));
      }
    }
  }

  /** SQL string literal. */
  private static String q(String s) {
    return "'" + s.replace("'", "''") + "'";
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> a = new HashMap<>();
    a.put("parallelism", "2");
    a.put("checkpoint-ms", "1000");
    a.put("minibatch-latency-ms", "1000");
    a.put("minibatch-size", "5000");
    // Flink's Kafka sink asks for 1 hour by default, more than the broker's default
    // transaction.max.timeout.ms (15 minutes), which refuses it; a transaction here lives one
    // checkpoint interval.
    a.put("txn-timeout-ms", "60000");
    for (String arg : args) {
      int eq = arg.indexOf('=');
      if (eq <= 0) {
        System.err.println("FlinkLikeCounts: not key=value: " + arg);
        System.exit(2);
      }
      a.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    for (String k : new String[] {"brokers", "raw", "out", "group", "txn-prefix",
                                  "checkpoint-dir"}) {
      if (!a.containsKey(k)) {
        System.err.println("FlinkLikeCounts: missing " + k + "=...");
        System.exit(2);
      }
    }
    int parallelism = Integer.parseInt(a.get("parallelism"));

    Configuration conf = new Configuration();
    conf.setString("execution.checkpointing.interval", a.get("checkpoint-ms") + " ms");
    conf.setString("execution.checkpointing.mode", "EXACTLY_ONCE");
    conf.setString("execution.checkpointing.dir", "file://" + a.get("checkpoint-dir"));
    conf.setString("state.backend.type", "hashmap"); // Flink's default, said explicitly
    conf.setString("table.exec.mini-batch.enabled", "true");
    conf.setString("table.exec.mini-batch.allow-latency", a.get("minibatch-latency-ms") + " ms");
    conf.setString("table.exec.mini-batch.size", a.get("minibatch-size"));
    conf.setString("table.optimizer.agg-phase-strategy", "TWO_PHASE");
    // The MiniCluster in this JVM: `parallelism` task slots, one per subtask of each operator.
    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
    StreamTableEnvironment t = StreamTableEnvironment.create(env);
    t.getConfig().addConfiguration(conf);
    t.createTemporarySystemFunction("like_delta", LikeDelta.class);

    String brokers = q(a.get("brokers"));
    t.executeSql(
        "CREATE TABLE raw_events (payload BYTES) WITH ("
            + "'connector' = 'kafka', 'topic' = " + q(a.get("raw")) + ", "
            + "'properties.bootstrap.servers' = " + brokers + ", "
            + "'properties.group.id' = " + q(a.get("group")) + ", "
            + "'scan.startup.mode' = 'earliest-offset', "
            + "'scan.bounded.mode' = 'latest-offset', "
            + "'value.format' = 'raw')");
    // post_id -> count; the value is the count as 8 big-endian bytes (raw format), as the
    // Streams baseline's Serdes.Long writes it
    t.executeSql(
        "CREATE TABLE like_counts (post_id STRING, likes BIGINT, "
            + "PRIMARY KEY (post_id) NOT ENFORCED) WITH ("
            + "'connector' = 'upsert-kafka', 'topic' = " + q(a.get("out")) + ", "
            + "'properties.bootstrap.servers' = " + brokers + ", "
            + "'key.format' = 'raw', 'value.format' = 'raw', "
            + "'value.fields-include' = 'EXCEPT_KEY', "
            + "'sink.delivery-guarantee' = 'exactly-once', "
            + "'sink.transactional-id-prefix' = " + q(a.get("txn-prefix")) + ", "
            + "'properties.transaction.timeout.ms' = " + q(a.get("txn-timeout-ms")) + ")");
    String insert =
        "INSERT INTO like_counts SELECT post_id, SUM(delta) AS likes "
            + "FROM raw_events, LATERAL TABLE(like_delta(payload)) AS e(post_id, delta) "
            + "GROUP BY post_id";
    System.err.println("hc-flink: plan\n" + t.explainSql(insert) + "\nhc-flink: end of plan");
    mark("submitting");
    TableResult r = t.executeSql(insert);
    r.await();
    mark("finished");
    System.exit(0);
  }
}
