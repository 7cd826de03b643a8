/* hotkeys: the hot set in topic.hotkeys (docs/FORMATS.md) for an operator and an event
 * calendar.
 *
 *   hotcount hotkeys [list] [--json] [--watch [--interval MS]]
 *   hotcount hotkeys declare POST --until TIME [--from TIME] [--salts N]
 *   hotcount hotkeys undeclare POST
 *
 * `list` reads the topic from its beginning to its end (it is compacted: small), keeps the last
 * record per key (post and source) and shows what is hot now: detected posts whose record has
 * not expired, declared posts between their start and their expiry, and declared posts still to
 * come as "scheduled". A declared post is hot from its start whatever its rate, so it shows
 * here before its first like: the listing computes it from the record, stage 2 need not have
 * seen the post. `declare` / `undeclare` write one record with source "declared" through an
 * idempotent producer and wait for the broker's acknowledgement. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_time.h"
#include "cli_wait.h"
#include "cmds.h"
#include "escape.h"
#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/group_admin.h"
#include "hotcount/hotset.h"
#include "hotcount/kafka.h"
#include "hotcount/offset.h"
#include "hotcount/topic_read.h"

#define META_TIMEOUT_MS 10000

static const hc_cli_opt_t hotkeys_opts[] = {
    {"json", 0, NULL, "list: one JSON object (per refresh with --watch)"},
    {"watch", 'w', NULL, "list: read the topic again every --interval until SIGINT"},
    {"interval", 0, "MS", "list --watch: ms between refreshes (default 2000)"},
    {"from", 0, "TIME",
     "declare: hot from TIME (default now; ms since the epoch or UTC YYYY-MM-DD[THH:MM[:SS]][Z])"},
    {"until", 0, "TIME", "declare: hot until TIME (required: a declaration always expires)"},
    {"salts", 0, "N", "declare: salts producers should use for the post (1..65536)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t hotkeys_cmd = {
    "hotkeys", "[list] | declare POST | undeclare POST",
    "Lists the current hot set from topic.hotkeys: posts stage 2 detected over "
    "hotkeys.enter.rate (until they stay below hotkeys.leave.rate for hotkeys.dwell.ms) and "
    "posts declared hot ahead of an event. `declare POST --until TIME [--from TIME] [--salts N]` "
    "makes POST hot from --from (default now) until --until whatever its rate; `undeclare POST` "
    "ends a declaration. Times are ms since the epoch or UTC YYYY-MM-DD[THH:MM[:SS]][Z], as for "
    "`hotcount dlq --since`.",
    hotkeys_opts};

/* ---- times: the formats `hotcount dlq --since` accepts (src/cli/cmd_dlq.c) ---- */

/* ---- list ---- */

typedef struct hk_set {
    json_t *index; /* key -> index in recs */
    hc_hotkey_record_t *recs;
    size_t n, cap;
    int64_t records; /* read */
    int64_t invalid; /* not a hotkeys record: skipped */
} hk_set_t;

static hc_err_t on_record(const rd_kafka_message_t *rkm, void *opaque)
{
    hk_set_t *set = opaque;
    set->records++;
    hc_hotkey_record_t rec;
    char errstr[256];
    if (!rkm->payload && rkm->key && rkm->key_len < HC_POST_ID_MAX + 16) {
        /* a tombstone: the post left the set; its key's record (if read) stops counting */
        char key[HC_POST_ID_MAX + 16];
        memcpy(key, rkm->key, rkm->key_len);
        key[rkm->key_len] = '\0';
        json_t *at = json_object_get(set->index, key);
        if (at) {
            set->recs[json_integer_value(at)].hot = false;
        }
        return HC_OK;
    }
    if (hc_hotkey_record_parse(rkm->payload, rkm->len, &rec, errstr, sizeof(errstr)) != HC_OK) {
        set->invalid++;
        return HC_OK;
    }
    /* keyed by what the record says (source and post), which is what compaction keeps */
    char key[HC_POST_ID_MAX + 16];
    size_t klen = hc_hotkey_record_key(&rec, key, sizeof(key) - 1);
    key[klen] = '\0';
    json_t *at = json_object_get(set->index, key);
    if (at) {
        set->recs[json_integer_value(at)] = rec;
        return HC_OK;
    }
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 64;
        hc_hotkey_record_t *recs = realloc(set->recs, cap * sizeof(*recs));
        if (!recs) {
            return HC_ERR_FATAL;
        }
        set->recs = recs;
        set->cap = cap;
    }
    set->recs[set->n] = rec;
    json_object_set_new(set->index, key, json_integer((json_int_t)set->n));
    set->n++;
    return HC_OK;
}

static void set_fini(hk_set_t *set)
{
    json_decref(set->index);
    free(set->recs);
    memset(set, 0, sizeof(*set));
}

static hc_err_t read_set(const hc_config_t *cfg, hk_set_t *set, char *errstr, size_t errstr_size)
{
    memset(set, 0, sizeof(*set));
    set->index = json_object();
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, errstr_size);
    if (!rk || !set->index) {
        hc_kafka_reader_destroy(rk);
        return rk ? HC_ERR_FATAL : HC_ERR_INVALID;
    }
    int count = 0;
    int64_t *low = NULL, *high = NULL;
    hc_err_t err = hc_topic_watermarks(rk, cfg->topic_hotkeys, META_TIMEOUT_MS, &count, &low, &high,
                                       errstr, errstr_size);
    hc_topic_range_t *ranges = err == HC_OK ? calloc((size_t)count + 1, sizeof(*ranges)) : NULL;
    if (err == HC_OK && !ranges) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
    }
    size_t nr = 0;
    for (int p = 0; err == HC_OK && p < count; p++) {
        if (high[p] > low[p]) { /* the end as it is now: records arriving meanwhile wait */
            ranges[nr++] = (hc_topic_range_t){p, HC_OFFSET_NONE, high[p]};
        }
    }
    if (err == HC_OK && nr > 0) {
        err = hc_topic_read_ranges(rk, cfg->topic_hotkeys, ranges, nr, on_record, set, errstr,
                                   errstr_size);
    }
    free(ranges);
    free(low);
    free(high);
    hc_kafka_reader_destroy(rk);
    return err;
}

typedef struct hk_row {
    const hc_hotkey_record_t *rec;
    const char *state; /* "hot", "scheduled" */
} hk_row_t;

/* Hot first, hottest first, then scheduled ones by start. */
static int row_cmp(const void *a, const void *b)
{
    const hk_row_t *x = a, *y = b;
    bool xh = strcmp(x->state, "hot") == 0, yh = strcmp(y->state, "hot") == 0;
    if (xh != yh) {
        return xh ? -1 : 1;
    }
    if (!xh) {
        return x->rec->since_ms < y->rec->since_ms ? -1 : x->rec->since_ms > y->rec->since_ms;
    }
    if (x->rec->source != y->rec->source) {
        return x->rec->source == HC_HOTKEY_DECLARED ? -1 : 1;
    }
    return x->rec->rate > y->rec->rate ? -1 : x->rec->rate < y->rec->rate;
}

static void print_set(const hc_config_t *cfg, const hk_set_t *set, int64_t now, bool json)
{
    hk_row_t *rows = calloc(set->n + 1, sizeof(*rows));
    size_t nrows = 0;
    for (size_t i = 0; rows && i < set->n; i++) {
        const hc_hotkey_record_t *r = &set->recs[i];
        if (hc_hotkey_record_is_hot(r, now)) {
            rows[nrows++] = (hk_row_t){r, "hot"};
        } else if (r->hot && r->source == HC_HOTKEY_DECLARED && now < r->since_ms &&
                   (r->expires_ms == HC_HOTSET_NONE || now < r->expires_ms)) {
            rows[nrows++] = (hk_row_t){r, "scheduled"};
        } /* cooled, undeclared or expired: not in the set */
    }
    if (rows) {
        qsort(rows, nrows, sizeof(*rows), row_cmp);
    }
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < nrows; i++) {
            const hc_hotkey_record_t *r = rows[i].rec;
            json_t *o = json_pack(
                "{s:s%,s:s,s:s,s:f,s:I,s:o}", "post", r->post_id, r->post_id_len, "state",
                rows[i].state, "source", r->source == HC_HOTKEY_DECLARED ? "declared" : "detected",
                "rate", r->rate, "since", (json_int_t)r->since_ms, "expires",
                r->expires_ms == HC_HOTSET_NONE ? json_null() : json_integer(r->expires_ms));
            if (o && r->salts > 0) {
                json_object_set_new(o, "salts", json_integer(r->salts));
            }
            json_array_append_new(arr, o);
        }
        json_t *top = json_pack("{s:s,s:I,s:I,s:I,s:o}", "topic", cfg->topic_hotkeys, "now",
                                (json_int_t)now, "records", (json_int_t)set->records, "invalid",
                                (json_int_t)set->invalid, "hot", arr);
        char *s = top ? json_dumps(top, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (s) {
            printf("%s\n", s);
        }
        free(s);
        json_decref(top);
    } else {
        char when[40];
        printf("%s at %s: %zu hot or scheduled (%" PRId64 " records read%s)\n", cfg->topic_hotkeys,
               hc_cli_format_time(now, false, when, sizeof(when)), nrows, set->records,
               set->invalid ? ", some not hotkeys records" : "");
        printf("post\tstate\tsource\trate\tsince\texpires\tsalts\n");
        for (size_t i = 0; i < nrows; i++) {
            const hc_hotkey_record_t *r = rows[i].rec;
            char post[HC_CLI_ESCAPED_SIZE(HC_POST_ID_MAX)], since[40], expires[40], salts[16];
            snprintf(salts, sizeof(salts), "%d", (int)r->salts);
            printf("%s\t%s\t%s\t%.0f\t%s\t%s\t%s\n",
                   hc_cli_escape(r->post_id, r->post_id_len, post, sizeof(post)), rows[i].state,
                   r->source == HC_HOTKEY_DECLARED ? "declared" : "detected", r->rate,
                   hc_cli_format_time(r->since_ms, false, since, sizeof(since)),
                   hc_cli_format_time(r->expires_ms, false, expires, sizeof(expires)),
                   r->salts > 0 ? salts : "-");
        }
    }
    fflush(stdout);
    free(rows);
}

static int list(hc_cli_t *cli)
{
    uint64_t interval = 2000;
    if (!hc_cli_u64(cli, "interval", 2000, &interval) || interval < 100 || interval > 3600000) {
        hc_cli_error(cli, "--interval must be within 100..3600000 ms");
        return HC_EXIT_USAGE;
    }
    bool watch = hc_cli_has(cli, "watch");
    if (watch) {
        hc_cli_install_signals();
    }
    do {
        hk_set_t set;
        char errstr[512];
        hc_err_t err = read_set(&cli->cfg, &set, errstr, sizeof(errstr));
        if (err != HC_OK) {
            set_fini(&set);
            hc_cli_error(cli, "%s", errstr);
            return err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
        }
        print_set(&cli->cfg, &set, hc_wall_ms(), hc_cli_has(cli, "json"));
        set_fini(&set);
    } while (watch && !hc_cli_wait((int64_t)interval, &hc_cli_stop));
    return HC_EXIT_OK;
}

/* ---- declare / undeclare ---- */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    rd_kafka_resp_err_t *delivered = opaque;
    if (*delivered == RD_KAFKA_RESP_ERR__IN_PROGRESS || rkm->err) {
        *delivered = rkm->err; /* the first error of the record and its tombstone */
    }
}

static int write_record(hc_cli_t *cli, const hc_hotkey_record_t *rec)
{
    char errstr[512];
    rd_kafka_resp_err_t delivered = RD_KAFKA_RESP_ERR__IN_PROGRESS;
    hc_kafka_opts_t opts = {.dr_msg_cb = dr_cb, .opaque = &delivered};
    rd_kafka_t *rk = hc_kafka_new(&cli->cfg, HC_KAFKA_ROLE_PRODUCER, &opts, errstr, sizeof(errstr));
    if (!rk) {
        hc_cli_error(cli, "%s", errstr);
        return HC_EXIT_USAGE;
    }
    char key[HC_POST_ID_MAX + 16];
    size_t klen = hc_hotkey_record_key(rec, key, sizeof(key));
    char *value = hc_hotkey_record_encode(rec);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__FAIL;
    if (value && klen > 0) {
        err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cli->cfg.topic_hotkeys),
                                RD_KAFKA_V_KEY(key, klen), RD_KAFKA_V_VALUE(value, strlen(value)),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    }
    if (!err && !rec->hot) {
        /* undeclared: a tombstone after the "cool" record, so compaction forgets the post
         * (docs/FORMATS.md, "Hot keys") */
        err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cli->cfg.topic_hotkeys),
                                RD_KAFKA_V_KEY(key, klen), RD_KAFKA_V_VALUE(NULL, 0),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    }
    free(value);
    if (!err) {
        rd_kafka_flush(rk, (int)cli->cfg.timeouts.drain_ms);
        err = delivered;
    }
    rd_kafka_destroy(rk);
    if (err) {
        hc_cli_error(cli, "writing to %s: %s", cli->cfg.topic_hotkeys, rd_kafka_err2str(err));
        return HC_EXIT_FAILED;
    }
    return HC_EXIT_OK;
}

static int declare(hc_cli_t *cli, bool undeclare)
{
    if (cli->npos != 2) {
        hc_cli_error(cli, "%s takes one POST", cli->pos[0]);
        return HC_EXIT_USAGE;
    }
    const char *post = cli->pos[1];
    if (!hc_post_id_valid(post, strlen(post))) {
        hc_cli_error(cli, "POST: want 1..%d bytes of UTF-8 without control characters",
                     HC_POST_ID_MAX);
        return HC_EXIT_USAGE;
    }
    int64_t now = hc_wall_ms();
    hc_hotkey_record_t rec = {.post_id_len = strlen(post),
                              .hot = !undeclare,
                              .since_ms = now,
                              .source = HC_HOTKEY_DECLARED,
                              .expires_ms = HC_HOTSET_NONE};
    memcpy(rec.post_id, post, rec.post_id_len);
    if (undeclare) {
        if (hc_cli_has(cli, "from") || hc_cli_has(cli, "until") || hc_cli_has(cli, "salts")) {
            hc_cli_error(cli, "undeclare takes no --from, --until or --salts");
            return HC_EXIT_USAGE;
        }
    } else {
        uint64_t salts = 0;
        if (!hc_cli_has(cli, "until")) {
            hc_cli_error(cli, "declare needs --until TIME: a declaration always expires");
            return HC_EXIT_USAGE;
        }
        if ((hc_cli_has(cli, "from") &&
             !hc_cli_parse_time(hc_cli_str(cli, "from", ""), &rec.since_ms)) ||
            !hc_cli_parse_time(hc_cli_str(cli, "until", ""), &rec.expires_ms)) {
            hc_cli_error(cli, "--from/--until: a time is ms since the epoch or UTC "
                              "YYYY-MM-DD[THH:MM[:SS]][Z]");
            return HC_EXIT_USAGE;
        }
        if (rec.expires_ms <= rec.since_ms || rec.expires_ms <= now) {
            hc_cli_error(cli, "--until must be after --from and in the future");
            return HC_EXIT_USAGE;
        }
        if (!hc_cli_u64(cli, "salts", 0, &salts) ||
            (hc_cli_has(cli, "salts") && (salts < 1 || salts > 65536))) {
            hc_cli_error(cli, "--salts must be within 1..65536");
            return HC_EXIT_USAGE;
        }
        rec.salts = (int32_t)salts;
    }
    int status = write_record(cli, &rec);
    if (status == HC_EXIT_OK) {
        char from[40], until[40], esc[HC_CLI_ESCAPED_SIZE(HC_POST_ID_MAX)];
        hc_cli_escape(post, rec.post_id_len, esc, sizeof(esc));
        if (undeclare) {
            printf("undeclared %s\n", esc);
        } else {
            printf("declared %s hot from %s until %s\n", esc,
                   hc_cli_format_time(rec.since_ms, false, from, sizeof(from)),
                   hc_cli_format_time(rec.expires_ms, false, until, sizeof(until)));
        }
    }
    return status;
}

int hc_cmd_hotkeys(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &hotkeys_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    const char *verb = cli.npos > 0 ? cli.pos[0] : "list";
    if (!cli.cfg.topic_hotkeys[0]) {
        hc_cli_error(&cli, "topic.hotkeys is empty (off)");
        status = HC_EXIT_USAGE;
    } else if (strcmp(verb, "list") == 0 && cli.npos > 1) {
        hc_cli_error(&cli, "list takes no arguments");
        status = HC_EXIT_USAGE;
    } else if (strcmp(verb, "list") == 0) {
        status = list(&cli);
    } else if (strcmp(verb, "declare") == 0 || strcmp(verb, "undeclare") == 0) {
        status = declare(&cli, strcmp(verb, "undeclare") == 0);
    } else {
        hc_cli_error(&cli, "name a subcommand: list, declare or undeclare (see --help)");
        status = HC_EXIT_USAGE;
    }
    hc_cli_fini(&cli);
    return status;
}
