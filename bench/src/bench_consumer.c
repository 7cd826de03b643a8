/* The baselines that read likes.raw: the Kafka floor and the naive counters.
 *
 *   bench_consumer --mode discard|redis|redis-pipe|pg|pg-update --brokers B --topic T --group G
 *                  --events N [--max-seconds S] [--redis URI] [--pg URI] [--prefix P]
 *                  [--pipeline N] [--scenario NAME] [--clock-calls N] [--batch N]
 *
 * The consumer is built exactly as stage 1's (hc_kafka_new with the stage-1 consumer role: same
 * assignor, isolation level, fetch settings). Modes:
 *   discard     reads and drops every message: the floor any Kafka consumer pays
 *   redis       one INCRBY <prefix><post_id> ±1 per event, waiting for each reply
 *   redis-pipe  the same, --pipeline commands (default 1000) per round trip
 *   pg          one INSERT … ON CONFLICT DO UPDATE per event, autocommit (one transaction each)
 *   pg-update   one UPDATE … SET likes = likes + delta per event, autocommit; the INSERT above
 *               only for a post's first event (no row to update yet)
 * --clock-calls N reads CLOCK_MONOTONIC N times per message, as stage 1's poll loop does (its
 * heartbeat, poll timeout and window check): what that costs is the difference from N = 0.
 * --batch N takes up to N messages per rd_kafka_consume_batch_queue call on the consumer's queue
 * (default 1000, as stage 1's loop does: HC_CONSUME_BATCH in include/stage/hotcount/stage_loop.h);
 * --batch 0 polls one message per rd_kafka_consumer_poll instead (the loop before 2026-12-01):
 * the A/B of docs/RELIABILITY.md's batch-consume row.
 * The store modes parse each event with hc_event_parse (the fast parser: the baseline is not
 * slowed by its JSON) and commit Kafka offsets the ordinary way (the consumer's positions every
 * 5 s, asynchronously, after the store call returned: what enable.auto.commit does, which
 * hotcount's configuration refuses for its own clients), so they count at least once, not
 * exactly once.
 *
 * It stops after --events messages or --max-seconds of consuming (the slow baselines are
 * measured over a bounded prefix) and prints one JSON line: wall and CPU time (getrusage of the
 * whole process, every librdkafka thread included) from the first message to the last. */
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/event.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/store.h"
#include "workload.h"

enum mode { MODE_DISCARD, MODE_REDIS, MODE_REDIS_PIPE, MODE_PG, MODE_PG_UPDATE };

typedef struct sink {
    enum mode mode;
    redisContext *redis;
    PGconn *pg;
    const char *prefix;
    int pipeline;
    int pending;
    int64_t writes;
    int64_t celeb_writes;
} sink_t;

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return argv[i + 1];
        }
    }
    return def;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int redis_open(sink_t *s, const char *uri)
{
    char host[256] = "127.0.0.1";
    int port = 6379;
    if (!uri || sscanf(uri, "redis://%255[^:/]:%d", host, &port) < 1) {
        fprintf(stderr, "bench_consumer: --redis redis://HOST:PORT required\n");
        return -1;
    }
    s->redis = redisConnect(host, port);
    if (!s->redis || s->redis->err) {
        fprintf(stderr, "bench_consumer: redis: %s\n", s->redis ? s->redis->errstr : "oom");
        return -1;
    }
    return 0;
}

static int pg_open(sink_t *s, const char *uri)
{
    if (!uri) {
        fprintf(stderr, "bench_consumer: --pg URI required\n");
        return -1;
    }
    s->pg = PQconnectdb(uri);
    if (PQstatus(s->pg) != CONNECTION_OK) {
        fprintf(stderr, "bench_consumer: pg: %s", PQerrorMessage(s->pg));
        return -1;
    }
    PGresult *res = PQexec(s->pg, "CREATE TABLE IF NOT EXISTS naive_counts "
                                  "(post_id TEXT PRIMARY KEY, likes BIGINT NOT NULL)");
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    res = ok ? PQprepare(s->pg, "upsert",
                         "INSERT INTO naive_counts (post_id, likes) VALUES ($1, $2::bigint) "
                         "ON CONFLICT (post_id) DO UPDATE SET likes = naive_counts.likes + "
                         "EXCLUDED.likes",
                         2, NULL)
             : NULL;
    ok = ok && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    res = ok ? PQprepare(s->pg, "update",
                         "UPDATE naive_counts SET likes = likes + $2::bigint WHERE post_id = $1", 2,
                         NULL)
             : NULL;
    ok = ok && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        fprintf(stderr, "bench_consumer: pg setup: %s", PQerrorMessage(s->pg));
        return -1;
    }
    return 0;
}

static int redis_drain(sink_t *s)
{
    for (; s->pending > 0; s->pending--) {
        redisReply *reply = NULL;
        if (redisGetReply(s->redis, (void **)&reply) != REDIS_OK || !reply ||
            reply->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "bench_consumer: redis reply: %s\n",
                    reply ? reply->str : s->redis->errstr);
            return -1;
        }
        freeReplyObject(reply);
    }
    return 0;
}

static int sink_write(sink_t *s, const hc_event_t *ev)
{
    bool celeb = ev->post_id_len == strlen(BENCH_CELEB_POST) &&
                 memcmp(ev->post_id, BENCH_CELEB_POST, ev->post_id_len) == 0;
    s->writes++;
    s->celeb_writes += celeb;
    if (s->mode == MODE_REDIS || s->mode == MODE_REDIS_PIPE) {
        redisAppendCommand(s->redis, "INCRBY %s%b %d", s->prefix, ev->post_id, ev->post_id_len,
                           ev->delta);
        s->pending++;
        return s->pending >= s->pipeline ? redis_drain(s) : 0;
    }
    char delta[8];
    snprintf(delta, sizeof(delta), "%d", ev->delta);
    const char *values[2] = {ev->post_id, delta};
    PGresult *res;
    if (s->mode == MODE_PG_UPDATE) {
        res = PQexecPrepared(s->pg, "update", 2, values, NULL, NULL, 0);
        bool updated =
            PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdTuples(res), "1") == 0;
        if (updated) {
            PQclear(res);
            return 0;
        }
        PQclear(res);
    }
    res = PQexecPrepared(s->pg, "upsert", 2, values, NULL, NULL, 0);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        fprintf(stderr, "bench_consumer: upsert: %s", PQerrorMessage(s->pg));
        return -1;
    }
    return 0;
}

#define AUTO_COMMIT_S 5.0 /* librdkafka's auto.commit.interval.ms */

/* What enable.auto.commit does: the consumer's positions, committed asynchronously. */
static void commit_positions(rd_kafka_t *rk)
{
    rd_kafka_topic_partition_list_t *pos = NULL;
    if (rd_kafka_assignment(rk, &pos) == RD_KAFKA_RESP_ERR_NO_ERROR && pos->cnt > 0 &&
        rd_kafka_position(rk, pos) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_commit(rk, pos, 1);
    }
    if (pos) {
        rd_kafka_topic_partition_list_destroy(pos);
    }
}

int main(int argc, char **argv)
{
    const char *mode_name = arg(argc, argv, "--mode", "discard");
    const char *brokers = arg(argc, argv, "--brokers", NULL);
    const char *topic = arg(argc, argv, "--topic", NULL);
    const char *group = arg(argc, argv, "--group", NULL);
    const char *scenario = arg(argc, argv, "--scenario", "floor");
    int64_t events = strtoll(arg(argc, argv, "--events", "0"), NULL, 10);
    double max_seconds = strtod(arg(argc, argv, "--max-seconds", "0"), NULL);
    int clock_calls = atoi(arg(argc, argv, "--clock-calls", "0"));
    int batch = atoi(arg(argc, argv, "--batch", "1000"));
    volatile int64_t clock_sink = 0;
    sink_t s = {.prefix = arg(argc, argv, "--prefix", "naive:"), .pipeline = 1};
    if (strcmp(mode_name, "discard") == 0) {
        s.mode = MODE_DISCARD;
    } else if (strcmp(mode_name, "redis") == 0) {
        s.mode = MODE_REDIS;
    } else if (strcmp(mode_name, "redis-pipe") == 0) {
        s.mode = MODE_REDIS_PIPE;
        s.pipeline = atoi(arg(argc, argv, "--pipeline", "1000"));
    } else if (strcmp(mode_name, "pg") == 0) {
        s.mode = MODE_PG;
    } else if (strcmp(mode_name, "pg-update") == 0) {
        s.mode = MODE_PG_UPDATE;
    } else {
        mode_name = NULL;
    }
    if (!mode_name || !brokers || !topic || !group || events <= 0 || s.pipeline < 1 || batch < 0) {
        fprintf(stderr,
                "usage: bench_consumer --mode discard|redis|redis-pipe|pg|pg-update --brokers B "
                "--topic T --group G --events N [...] (see the source's header)\n");
        return 2;
    }
    if ((s.mode == MODE_REDIS || s.mode == MODE_REDIS_PIPE) &&
        redis_open(&s, arg(argc, argv, "--redis", NULL)) != 0) {
        return 1;
    }
    if ((s.mode == MODE_PG || s.mode == MODE_PG_UPDATE) &&
        pg_open(&s, arg(argc, argv, "--pg", NULL)) != 0) {
        return 1;
    }

    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    hc_config_t cfg;
    char errstr[512];
    bool auto_commit = s.mode != MODE_DISCARD;
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK ||
        hc_config_set(&cfg, "brokers", brokers, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_consumer: config: %s\n", errstr);
        return 1;
    }
    hc_kafka_opts_t kopts = {.group_id = group};
    rd_kafka_t *rk =
        hc_kafka_new(&cfg, HC_KAFKA_ROLE_STAGE1_CONSUMER, &kopts, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "bench_consumer: %s\n", errstr);
        return 1;
    }
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);

    int64_t consumed = 0, invalid = 0;
    double w0 = 0, c0 = 0, deadline_idle = mono_s() + 120, next_commit = mono_s() + AUTO_COMMIT_S;
    int rc = 0;
    rd_kafka_queue_t *rkqu = batch > 0 ? rd_kafka_queue_get_consumer(rk) : NULL;
    rd_kafka_message_t **msgs = batch > 0 ? calloc((size_t)batch, sizeof(*msgs)) : NULL;
    ssize_t got = 0, next = 0;
    while (consumed < events) {
        rd_kafka_message_t *rkm = NULL;
        if (!rkqu) {
            rkm = rd_kafka_consumer_poll(rk, 100);
        } else {
            if (next == got) {
                got = rd_kafka_consume_batch_queue(rkqu, 100, msgs, (size_t)batch);
                next = 0;
                got = got < 0 ? 0 : got;
            }
            rkm = next < got ? msgs[next++] : NULL;
        }
        if (!rkm) {
            if (mono_s() > deadline_idle) {
                fprintf(stderr, "bench_consumer: no message for 120 s\n");
                rc = 1;
                break;
            }
            continue;
        }
        if (rkm->err) {
            rd_kafka_message_destroy(rkm);
            continue;
        }
        if (consumed == 0) {
            w0 = mono_s();
            c0 = cpu_s();
        }
        consumed++;
        for (int i = 0; i < clock_calls; i++) {
            clock_sink += hc_now_ms();
        }
        if (s.mode != MODE_DISCARD) {
            hc_event_t ev;
            if (hc_event_parse(rkm->payload, rkm->len, 4096, &ev) != HC_EVENT_OK) {
                invalid++;
            } else if (sink_write(&s, &ev) != 0) {
                rc = 1;
            }
        }
        rd_kafka_message_destroy(rkm);
        if (rc) {
            break;
        }
        if ((consumed & 255) == 0) {
            double now = mono_s();
            deadline_idle = now + 120;
            if (auto_commit && now >= next_commit) {
                commit_positions(rk);
                next_commit = now + AUTO_COMMIT_S;
            }
            if (max_seconds > 0 && now - w0 >= max_seconds) {
                break;
            }
        }
    }
    if (!rc && s.pending > 0) {
        rc = redis_drain(&s);
    }
    double wall = mono_s() - w0;
    double cpu = cpu_s() - c0;
    while (next < got) {
        rd_kafka_message_destroy(msgs[next++]);
    }
    free(msgs);
    if (rkqu) {
        rd_kafka_queue_destroy(rkqu);
    }
    /* Timing ends before the close: its final offset commit is not per-event work. */
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    hc_config_fini(&cfg);
    if (s.redis) {
        redisFree(s.redis);
    }
    if (s.pg) {
        PQfinish(s.pg);
    }
    if (rc == 0) {
        printf("{\"scenario\":\"%s\",\"variant\":\"%s\",\"batch\":%d,\"events\":%" PRId64
               ",\"wall_s\":%.6f,"
               "\"cpu_s\":%.6f,\"events_per_s\":%.1f,\"events_per_cpu_s\":%.1f,"
               "\"store_writes\":%" PRId64 ",\"celeb_writes\":%" PRId64 ",\"invalid\":%" PRId64
               ",\"complete\":%s}\n",
               scenario, mode_name, batch, consumed, wall, cpu, (double)consumed / wall,
               (double)consumed / cpu, s.writes, s.celeb_writes, invalid,
               consumed >= events ? "true" : "false");
    }
    return rc;
}
