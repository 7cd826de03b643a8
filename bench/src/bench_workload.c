/* The benchmark workload, made once and replayed into Kafka as often as needed.
 *
 *   bench_workload gen  --out FILE --events N --posts N [--zipf S] [--unlike F]
 *                       [--celeb-rate R] [--base-rate R] [--uniform] [--seed N]
 *   bench_workload load --file FILE --brokers B --topic T [--partitions N] [--rate R]
 *
 * gen writes one event per line, "<key>\t<json value>\n" (keys and values never hold a tab or
 * newline), so any tool can replay it. load creates the topic when it is missing (16 partitions
 * unless told), produces every line with the key, idempotently, straight from the mapped file,
 * and waits until each message is acknowledged. Both print one JSON object on stdout. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/kafka.h"
#include "hotcount/store.h"
#include "workload.h"

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return i + 1 < argc ? argv[i + 1] : "";
        }
    }
    return def;
}

static bool flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return true;
        }
    }
    return false;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmd_gen(int argc, char **argv)
{
    const char *out = arg(argc, argv, "--out", NULL);
    bench_workload_opts_t o = {
        .events = strtoull(arg(argc, argv, "--events", "1000000"), NULL, 10),
        .posts = strtoull(arg(argc, argv, "--posts", "1000000"), NULL, 10),
        .zipf_s = strtod(arg(argc, argv, "--zipf", "0.99"), NULL),
        .unlike_ratio = strtod(arg(argc, argv, "--unlike", "0.05"), NULL),
        .base_rate = strtod(arg(argc, argv, "--base-rate", "100000"), NULL),
        .celeb_rate = strtod(arg(argc, argv, "--celeb-rate", "50000"), NULL),
        .uniform = flag(argc, argv, "--uniform"),
        .seed = strtoull(arg(argc, argv, "--seed", "1"), NULL, 10),
        .salts = 16,
        .start_ms = 1764460800000, /* 2025-11-30T00:00:00Z */
    };
    if (!out || o.events == 0 || o.posts == 0) {
        fprintf(stderr, "bench_workload gen: --out FILE and positive --events, --posts\n");
        return 2;
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        perror(out);
        return 1;
    }
    static char buf[1 << 20];
    setvbuf(f, buf, _IOFBF, sizeof(buf));
    bench_workload_t w;
    bench_workload_init(&w, &o);
    char key[BENCH_KEY_MAX], value[BENCH_VALUE_MAX];
    size_t key_len, value_len;
    bool celeb;
    uint64_t bytes = 0;
    while (bench_workload_next(&w, key, &key_len, value, &value_len, &celeb)) {
        fwrite(key, 1, key_len, f);
        fputc('\t', f);
        fwrite(value, 1, value_len, f);
        fputc('\n', f);
        bytes += value_len;
    }
    if (fclose(f) != 0) {
        perror(out);
        return 1;
    }
    printf("{\"events\":%" PRIu64 ",\"posts\":%" PRIu64 ",\"zipf\":%g,\"uniform\":%s,"
           "\"celeb_events\":%" PRIu64 ",\"avg_value_bytes\":%.1f,\"virtual_seconds\":%.3f}\n",
           o.events, o.posts, o.zipf_s, o.uniform ? "true" : "false", w.celeb_events,
           (double)bytes / (double)o.events, w.t);
    return 0;
}

static int create_topic(rd_kafka_t *rk, const char *topic, int partitions)
{
    char errstr[512];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, -1, errstr, sizeof(errstr));
    if (!nt) {
        fprintf(stderr, "bench_workload: %s\n", errstr);
        return -1;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = -1;
    if (ev) {
        const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
        size_t n = 0;
        const rd_kafka_topic_result_t **tr =
            res ? rd_kafka_CreateTopics_result_topics(res, &n) : NULL;
        rd_kafka_resp_err_t err = rd_kafka_event_error(ev);
        if (!err && n == 1) {
            err = rd_kafka_topic_result_error(tr[0]);
        }
        if (!err || err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            rc = 0;
        } else {
            fprintf(stderr, "bench_workload: create %s: %s\n", topic, rd_kafka_err2str(err));
        }
        rd_kafka_event_destroy(ev);
    } else {
        fprintf(stderr, "bench_workload: create %s: timed out\n", topic);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

static int64_t acked, failed;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (rkm->err) {
        failed++;
    } else {
        acked++;
    }
}

static int cmd_load(int argc, char **argv)
{
    const char *file = arg(argc, argv, "--file", NULL);
    const char *brokers = arg(argc, argv, "--brokers", NULL);
    const char *topic = arg(argc, argv, "--topic", NULL);
    int partitions = atoi(arg(argc, argv, "--partitions", "16"));
    double rate = strtod(arg(argc, argv, "--rate", "0"), NULL);
    if (!file || !brokers || !topic) {
        fprintf(stderr, "bench_workload load: --file, --brokers and --topic are required\n");
        return 2;
    }
    int fd = open(file, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        perror(file);
        return 1;
    }
    const char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    hc_config_t cfg;
    char errstr[512];
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK ||
        hc_config_set(&cfg, "brokers", brokers, errstr, sizeof(errstr)) != HC_OK ||
        hc_config_set(&cfg, "kafka.producer.linger.ms", "20", errstr, sizeof(errstr)) != HC_OK ||
        hc_config_set(&cfg, "log.level", "warn", errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_workload: config: %s\n", errstr);
        return 1;
    }
    hc_kafka_opts_t kopts = {.dr_msg_cb = dr_cb};
    rd_kafka_t *rk = hc_kafka_new(&cfg, HC_KAFKA_ROLE_PRODUCER, &kopts, errstr, sizeof(errstr));
    if (!rk || create_topic(rk, topic, partitions) != 0) {
        fprintf(stderr, "bench_workload: %s\n", rk ? "topic" : errstr);
        return 1;
    }
    double t0 = now_s();
    int64_t sent = 0;
    const char *p = map, *end = map + st.st_size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *tab = memchr(p, '\t', (size_t)((nl ? nl : end) - p));
        if (!nl || !tab) {
            fprintf(stderr, "bench_workload: malformed line at byte %td\n", p - map);
            return 1;
        }
        if (rate > 0 && (sent & 255) == 0) {
            double due = t0 + (double)sent / rate;
            double now = now_s();
            if (due > now) {
                struct timespec ts = {(time_t)(due - now),
                                      (long)((due - now - (double)(time_t)(due - now)) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        for (;;) {
            /* no copy: the payload stays in the mapping until every delivery report is in */
            rd_kafka_resp_err_t err = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(p, (size_t)(tab - p)),
                RD_KAFKA_V_VALUE((void *)(tab + 1), (size_t)(nl - tab - 1)), RD_KAFKA_V_END);
            if (!err) {
                break;
            }
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "bench_workload: produce: %s\n", rd_kafka_err2str(err));
                return 1;
            }
            rd_kafka_poll(rk, 10);
        }
        sent++;
        rd_kafka_poll(rk, 0);
        p = nl + 1;
    }
    while (rd_kafka_outq_len(rk) > 0) {
        rd_kafka_poll(rk, 100);
    }
    double secs = now_s() - t0;
    rd_kafka_destroy(rk);
    hc_config_fini(&cfg);
    munmap((void *)map, (size_t)st.st_size);
    close(fd);
    printf("{\"topic\":\"%s\",\"loaded\":%" PRId64 ",\"failed\":%" PRId64 ",\"seconds\":%.3f}\n",
           topic, acked, failed, secs);
    return failed || acked != sent ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gen") == 0) {
        return cmd_gen(argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "load") == 0) {
        return cmd_load(argc, argv);
    }
    fprintf(stderr, "usage: bench_workload gen|load [options] (see the source's header)\n");
    return 2;
}
