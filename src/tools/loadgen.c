#include "hotcount/loadgen.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/hotkeys_follow.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/producer_key.h"
#include "hotcount/salt.h"
#include "hotcount/zipf.h"

/* Delivery-report opaque: rank << 2 | unlike << 1 | invalid. */
#define OPQ_INVALID 1u
#define OPQ_UNLIKE 2u

/* Adaptive salting: how often the loop reads new topic.hotkeys records (a poll with no wait,
 * cheap), and how long it may take to catch up at start. A change reaches the keys within 64
 * events, or within one --rate pause when the rate is low. */
#define FOLLOW_EVERY 64
#define FOLLOW_OPEN_TIMEOUT_MS 30000

hc_err_t hc_tally_init(hc_tally_t *tally, uint64_t posts)
{
    memset(tally, 0, sizeof(*tally));
    tally->likes = calloc(posts + 1, sizeof(*tally->likes));
    if (!tally->likes) {
        return HC_ERR_FATAL;
    }
    tally->posts = posts;
    return HC_OK;
}

void hc_tally_fini(hc_tally_t *tally)
{
    if (tally) {
        free(tally->likes);
        tally->likes = NULL;
    }
}

typedef struct compare_ctx {
    const hc_tally_t *tally;
    unsigned char *seen; /* [posts + 1] */
    int64_t rows;
    int64_t mismatches;
    hc_tally_report_fn report;
    void *opaque;
} compare_ctx_t;

static void mismatch(compare_ctx_t *c, const char *post_id, size_t len, int64_t acked,
                     int64_t stored)
{
    c->mismatches++;
    if (c->report) {
        c->report(post_id, len, acked, stored, c->opaque);
    }
}

static bool compare_row(const char *post_id, size_t len, int64_t likes, void *opaque)
{
    compare_ctx_t *c = opaque;
    char buf[24];
    char *end = NULL;
    uint64_t rank = 0;
    c->rows++;
    if (len > 0 && len < sizeof(buf)) {
        memcpy(buf, post_id, len);
        buf[len] = '\0';
        rank = strtoull(buf, &end, 10);
    }
    if (!end || *end || rank < 1 || rank > c->tally->posts) {
        mismatch(c, post_id, len, 0, likes); /* not a post the generator named */
    } else {
        c->seen[rank] = 1;
        if (c->tally->likes[rank] != likes) {
            mismatch(c, post_id, len, c->tally->likes[rank], likes);
        }
    }
    return true;
}

hc_err_t hc_tally_compare(const hc_tally_t *tally, hc_store_t *st, int64_t *rows,
                          int64_t *mismatches, hc_tally_report_fn report, void *opaque,
                          char *errstr, size_t errstr_size)
{
    compare_ctx_t c = {.tally = tally, .report = report, .opaque = opaque};
    c.seen = calloc(tally->posts + 1, 1);
    if (!c.seen) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hc_err_t err = hc_store_foreach(st, compare_row, &c, errstr, errstr_size);
    for (uint64_t rank = 1; err == HC_OK && rank <= tally->posts; rank++) {
        if (!c.seen[rank] && tally->likes[rank] != 0) {
            char post[24];
            int len = snprintf(post, sizeof(post), "%" PRIu64, rank);
            mismatch(&c, post, (size_t)len, tally->likes[rank], 0);
        }
    }
    free(c.seen);
    *rows = c.rows;
    *mismatches = c.mismatches;
    return err;
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    hc_tally_t *tally = opaque;
    if (!tally) {
        return;
    }
    if (rkm->err) {
        atomic_fetch_add(&tally->failed, 1);
        return;
    }
    uintptr_t opq = (uintptr_t)rkm->_private;
    if (opq & OPQ_INVALID) {
        atomic_fetch_add(&tally->acked_invalid, 1);
        return;
    }
    uint64_t rank = opq >> 2;
    tally->likes[rank] += (opq & OPQ_UNLIKE) ? -1 : 1;
    atomic_fetch_add(&tally->acked_valid, 1);
}

/* Malformed events, one per invalid class the contract names, plus a few adversarial ones. */
static size_t format_invalid(char *buf, size_t size, uint64_t seq, uint64_t rank)
{
    switch (seq % HC_LOADGEN_INVALID_KINDS) {
    case 0:
        return (size_t)snprintf(buf, size, "not json at all %" PRIu64, seq);
    case 1:
        return (size_t)snprintf(buf, size, "[\"%" PRIu64 "\"]", rank);
    case 2:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"%" PRIu64 "\",\"post_id\":\"1\"}", rank);
    case 3:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"p\xff%" PRIu64 "\"}", rank);
    case 4:
        return (size_t)snprintf(buf, size, "{\"user_id\":\"u%" PRIu64 "\"}", seq);
    case 5:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"\"}");
    case 6:
        return (size_t)snprintf(buf, size, "{\"post_id\":-%" PRIu64 "}", rank);
    case 7:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"%" PRIu64 "\",\"op\":\"love\"}", rank);
    case 8:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"%" PRIu64 "\"} trailing", rank);
    case 9:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"%" PRIu64 "\",\"ts\":1.5}", rank);
    case 10:
        return (size_t)snprintf(buf, size, "{\"post_id\":%" PRIu64 ".0}", rank);
    default:
        return (size_t)snprintf(buf, size, "{\"post_id\":\"%" PRIu64 "\",\"op\":1", rank);
    }
}

static void sleep_us(int64_t us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static hc_err_t check_opts(const hc_loadgen_opts_t *o, char *errstr, size_t errstr_size)
{
    if (o->posts < 1) {
        hc_errstr_set(errstr, errstr_size, "--posts must be at least 1");
    } else if (!(o->zipf_s > 0)) {
        hc_errstr_set(errstr, errstr_size, "--zipf must be above 0");
    } else if (!(o->unlike_ratio >= 0 && o->unlike_ratio <= 1)) {
        hc_errstr_set(errstr, errstr_size, "--unlike-ratio must be within 0..1");
    } else if (!(o->invalid_ratio >= 0 && o->invalid_ratio <= 1)) {
        hc_errstr_set(errstr, errstr_size, "--invalid-ratio must be within 0..1");
    } else if (!(o->rate >= 0)) {
        hc_errstr_set(errstr, errstr_size, "--rate must be 0 (unlimited) or positive");
    } else {
        return HC_OK;
    }
    return HC_ERR_INVALID;
}

hc_err_t hc_loadgen_run(const hc_config_t *cfg, const hc_loadgen_opts_t *opts, hc_tally_t *tally,
                        const atomic_bool *stop, char *errstr, size_t errstr_size)
{
    hc_err_t err = check_opts(opts, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (tally && tally->posts < opts->posts) {
        hc_errstr_set(errstr, errstr_size, "tally sized for fewer posts");
        return HC_ERR_INVALID;
    }
    hc_kafka_opts_t kopts = {.dr_msg_cb = dr_msg_cb, .opaque = tally};
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_PRODUCER, &kopts, errstr, errstr_size);
    if (!rk) {
        return HC_ERR_INVALID;
    }
    /* Adaptive: the view is caught up with topic.hotkeys before the first event, then followed
     * from this loop (the view's one owner thread), every FOLLOW_EVERY events. */
    hc_hotview_t *hv = NULL;
    hc_hotkeys_follow_t *follow = NULL;
    if (opts->adaptive) {
        hv = hc_hotview_new((uint32_t)cfg->salts);
        if (!hv) {
            hc_errstr_set(errstr, errstr_size, "out of memory");
            rd_kafka_destroy(rk);
            return HC_ERR_FATAL;
        }
        err = hc_hotkeys_follow_open(cfg, hv, FOLLOW_OPEN_TIMEOUT_MS, &follow, errstr, errstr_size);
        if (err != HC_OK) {
            hc_hotview_destroy(hv);
            rd_kafka_destroy(rk);
            return err;
        }
    }
    hc_rng_t rng;
    hc_rng_init(&rng, opts->seed);
    hc_zipf_t zipf;
    hc_zipf_init(&zipf, opts->posts, opts->zipf_s);
    int64_t start_us = hc_now_ms() * 1000;
    uint64_t seq;
    for (seq = 0; seq < opts->events; seq++) {
        if ((seq & 1023) == 0) {
            if (stop && atomic_load(stop)) {
                break;
            }
            if (opts->rate > 0) {
                int64_t due_us = start_us + (int64_t)((double)seq * 1e6 / opts->rate);
                int64_t now_us = hc_now_ms() * 1000;
                if (due_us > now_us) {
                    sleep_us(due_us - now_us);
                }
            }
            while (opts->consumed && (int64_t)seq - atomic_load(opts->consumed) > opts->max_ahead &&
                   !(stop && atomic_load(stop))) {
                rd_kafka_poll(rk, 5);
            }
            if ((err = hc_kafka_fatal_check(rk, errstr, errstr_size)) != HC_OK) {
                break;
            }
        }
        if (follow && (seq % FOLLOW_EVERY) == 0) {
            int64_t applied = hc_hotkeys_follow_poll(follow, 0);
            if (applied < 0) {
                hc_errstr_set(errstr, errstr_size, "out of memory following topic.hotkeys");
                err = HC_ERR_FATAL;
                break;
            }
        }
        uint64_t rank = hc_zipf_sample(&zipf, &rng);
        uint64_t user = hc_rng_below(&rng, 10000000);
        char post[24], user_id[24], key[64], value[256];
        int post_len = snprintf(post, sizeof(post), "%" PRIu64, rank);
        int user_len = snprintf(user_id, sizeof(user_id), "u%" PRIu64, user);
        size_t key_len;
        if (hv) {
            key_len = hc_producer_key(hv, post, (size_t)post_len, user_id, (size_t)user_len,
                                      hc_wall_ms(), key, sizeof(key));
        } else {
            uint32_t salt = hc_salt(user_id, (size_t)user_len, (uint32_t)cfg->salts);
            key_len = hc_salt_key(key, sizeof(key), post, (size_t)post_len, salt);
        }
        bool salted = key_len >= 2 && !(key[key_len - 2] == '#' && key[key_len - 1] == '0');
        uintptr_t opq;
        size_t len;
        if (opts->invalid_ratio > 0 && hc_rng_double(&rng) < opts->invalid_ratio) {
            len = format_invalid(value, sizeof(value), seq, rank);
            opq = OPQ_INVALID;
        } else {
            bool unlike = opts->unlike_ratio > 0 && hc_rng_double(&rng) < opts->unlike_ratio;
            const char *quote = (seq & 1) ? "" : "\"";
            len = (size_t)snprintf(value, sizeof(value),
                                   "{\"post_id\":%s%s%s,\"user_id\":\"%s\",\"op\":\"%s\","
                                   "\"ts\":%" PRId64 ",\"event_id\":\"e%" PRIu64 "\"}",
                                   quote, post, quote, user_id, unlike ? "unlike" : "like",
                                   hc_wall_ms(), seq);
            opq = (uintptr_t)rank << 2 | (unlike ? OPQ_UNLIKE : 0);
            if (tally && salted) {
                atomic_fetch_add(&tally->salted, 1);
            }
        }
        for (;;) {
            rd_kafka_resp_err_t rerr = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(cfg->topic_raw), RD_KAFKA_V_KEY(key, key_len),
                RD_KAFKA_V_VALUE(value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_OPAQUE((void *)opq), RD_KAFKA_V_END);
            if (rerr == RD_KAFKA_RESP_ERR_NO_ERROR) {
                break;
            }
            if (rerr != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                hc_errstr_set(errstr, errstr_size, "produce: %s", rd_kafka_err2str(rerr));
                err = HC_ERR_FATAL;
                goto flush;
            }
            rd_kafka_poll(rk, 10);
        }
        if (tally) {
            atomic_fetch_add(&tally->sent, 1);
        }
        rd_kafka_poll(rk, 0);
    }

flush:
    /* Every produced event ends in the tally as acknowledged or failed. */
    while (rd_kafka_outq_len(rk) > 0) {
        rd_kafka_poll(rk, 100);
        if (hc_kafka_fatal_check(rk, errstr, errstr_size) != HC_OK) {
            err = HC_ERR_FATAL;
            break;
        }
    }
    rd_kafka_destroy(rk);
    if (tally && hv) {
        atomic_fetch_add(&tally->hot_records, hc_hotview_records(hv)); /* catch-up included */
    }
    hc_hotkeys_follow_close(follow);
    hc_hotview_destroy(hv);
    return err;
}
