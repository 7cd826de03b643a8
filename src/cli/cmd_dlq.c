/* dlq: the dead-letter topic (topic.dlq) for an operator: `list` counts its records by reason
 * and by hour, `show` prints them with their reason, their source in topic.raw and the original
 * key and value bytes (escaped as `get` escapes post ids: escape.h; under --json as the same
 * escaped text, which is always valid UTF-8). Both only read: one HC_KAFKA_ROLE_READER client,
 * no group, read_committed (a dead letter of an aborted stage-1 transaction is not one). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_time.h"
#include "cmds.h"
#include "escape.h"
#include "hotcount/dlq_replay.h"
#include "hotcount/group_admin.h"
#include "hotcount/kafka.h"

#define HOUR_MS 3600000LL
#define TIME_NONE INT64_MIN

static const hc_cli_opt_t dlq_opts[] = {
    {"json", 0, NULL, "JSON output: list one object, show one object per record"},
    {"reason", 'r', "REASON", "only dead letters with this " HC_DLQ_HDR_ERROR " reason"},
    {"since", 0, "TIME", "only records from TIME on (ms since the epoch or UTC YYYY-MM-DDTHH:MM)"},
    {"until", 0, "TIME", "only records before TIME"},
    {"partition", 'p', "P", "only this partition of topic.dlq"},
    {"offset", 'o', "O", "with --partition: only the record at this offset"},
    {"count", 'n', "N", "show: at most N records, oldest first (default 20)"},
    {"scan", 0, "N", "read at most the newest N records per partition (default 0: all)"},
    {"dry-run", 0, NULL, "replay: count what would be replayed, write nothing"},
    {"group", 0, "GROUP",
     "replay: the group (and transactional id) keeping its progress (default "
     "<group.stage1>-dlq-replay)"},
    {"batch", 0, "N", "replay: records per transaction (default 500)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t dlq_cmd = {
    "dlq", "list|show|replay",
    "Reads the dead-letter topic (topic.dlq). `list` counts its records by reason and by hour; "
    "`show` prints each record's place, time, reason, source in topic.raw and original key and "
    "value (escaped as `get` escapes post ids), filtered by --reason, --since/--until and "
    "--partition/--offset. `replay --reason R [--since T] [--until T] [--dry-run]` re-publishes "
    "the selected records to topic.raw (header " HC_DLQ_HDR_REPLAYED_FROM
    "), exactly once per dead "
    "letter even when killed and run again (its progress is the offsets of --group, committed in "
    "the producer's transaction); a dead letter of a replayed record is never replayed again.",
    dlq_opts};

typedef struct dlq_filter {
    const char *reason; /* NULL: any */
    int64_t since, until;
} dlq_filter_t;

typedef struct dlq_ctx {
    const char *topic;
    dlq_filter_t filter;
    bool json;
    /* list */
    json_t *by_reason;
    json_t *by_hour; /* "YYYY-MM-DDTHH:00Z" -> {reason -> n} */
    int64_t matched;
    /* show */
    bool show;
    uint64_t limit;
} dlq_ctx_t;

static bool matches(const dlq_filter_t *f, const hc_dead_letter_t *dl)
{
    if (f->reason && (!dl->reason || dl->reason_len != strlen(f->reason) ||
                      memcmp(dl->reason, f->reason, dl->reason_len) != 0)) {
        return false;
    }
    if (f->since != TIME_NONE && dl->timestamp_ms < f->since) {
        return false;
    }
    return f->until == TIME_NONE || dl->timestamp_ms < f->until;
}

static void bump(json_t *obj, const char *key)
{
    json_t *n = json_object_get(obj, key);
    json_object_set_new(obj, key, json_integer(n ? json_integer_value(n) + 1 : 1));
}

static void show_one(const dlq_ctx_t *ctx, const hc_dead_letter_t *dl, const char *reason)
{
    char when[40], source[HC_CLI_ESCAPED_SIZE(400)], replayed[HC_CLI_ESCAPED_SIZE(400)];
    size_t vsize = HC_CLI_ESCAPED_SIZE(dl->value_len), ksize = HC_CLI_ESCAPED_SIZE(dl->key_len);
    char *value = malloc(vsize), *key = malloc(ksize);
    if (!value || !key) {
        free(value);
        free(key);
        return;
    }
    hc_cli_escape(dl->source ? dl->source : "", dl->source_len, source, sizeof(source));
    hc_cli_escape(dl->replayed_from ? dl->replayed_from : "", dl->replayed_from_len, replayed,
                  sizeof(replayed));
    hc_cli_escape(dl->key ? dl->key : "", dl->key_len, key, ksize);
    hc_cli_escape(dl->value ? dl->value : "", dl->value_len, value, vsize);
    hc_cli_format_time(dl->timestamp_ms, true, when, sizeof(when));
    if (ctx->json) {
        json_t *obj = json_pack("{s:s,s:i,s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:I}", "topic", ctx->topic,
                                "partition", (int)dl->partition, "offset", (json_int_t)dl->offset,
                                "timestamp_ms", (json_int_t)dl->timestamp_ms, "reason", reason,
                                "source", source, "replayed_from", replayed, "key", key, "value",
                                value, "value_len", (json_int_t)dl->value_len);
        char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (s) {
            printf("%s\n", s);
        }
        free(s);
        json_decref(obj);
    } else {
        printf("%s/%d/%" PRId64 "  %s  reason %s  source %s%s%s\n  key   %s\n  value %s\n",
               ctx->topic, (int)dl->partition, dl->offset, when, reason, source,
               dl->replayed_from ? "  replayed from " : "", dl->replayed_from ? replayed : "", key,
               value);
    }
    free(value);
    free(key);
}

static hc_err_t on_dead_letter(const hc_dead_letter_t *dl, void *opaque)
{
    dlq_ctx_t *ctx = opaque;
    if (!matches(&ctx->filter, dl)) {
        return HC_OK;
    }
    char reason[HC_CLI_ESCAPED_SIZE(64)];
    if (dl->reason) {
        hc_cli_escape(dl->reason, dl->reason_len < 64 ? dl->reason_len : 64, reason,
                      sizeof(reason));
    } else {
        snprintf(reason, sizeof(reason), "unknown");
    }
    ctx->matched++;
    if (ctx->show) {
        if ((uint64_t)ctx->matched > ctx->limit) {
            return HC_ERR_FULL; /* enough: stops the read */
        }
        show_one(ctx, dl, reason);
        return HC_OK;
    }
    bump(ctx->by_reason, reason);
    char hour[40] = "-";
    if (dl->timestamp_ms >= 0) {
        hc_cli_format_time(dl->timestamp_ms / HOUR_MS * HOUR_MS, true, hour, sizeof(hour));
        memcpy(hour + 13, ":00Z", 5); /* "YYYY-MM-DDTHH:00Z" */
    }
    json_t *h = json_object_get(ctx->by_hour, hour);
    if (!h) {
        h = json_object();
        json_object_set_new(ctx->by_hour, hour, h);
    }
    bump(h, reason);
    return HC_OK;
}

static void print_list(const dlq_ctx_t *ctx, int64_t scanned, bool partial)
{
    if (ctx->json) {
        json_t *obj = json_pack("{s:s,s:I,s:I,s:b,s:O,s:O}", "topic", ctx->topic, "records",
                                (json_int_t)ctx->matched, "scanned", (json_int_t)scanned, "partial",
                                partial, "by_reason", ctx->by_reason, "by_hour", ctx->by_hour);
        char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (s) {
            printf("%s\n", s);
        }
        free(s);
        json_decref(obj);
        return;
    }
    printf("%s: %" PRId64 " dead letters%s\n\nreason\tcount\n", ctx->topic, ctx->matched,
           partial ? " (newest --scan per partition only)" : "");
    const char *reason;
    json_t *n;
    json_object_foreach(ctx->by_reason, reason, n)
    {
        printf("%s\t%" JSON_INTEGER_FORMAT "\n", reason, json_integer_value(n));
    }
    printf("\nhour\treason\tcount\n");
    /* hours in order: the keys sort as times */
    size_t nh = json_object_size(ctx->by_hour), i = 0;
    const char **hours = calloc(nh + 1, sizeof(*hours));
    const char *hour;
    json_t *h;
    json_object_foreach(ctx->by_hour, hour, h)
    {
        hours[i++] = hour;
    }
    for (size_t a = 1; hours && a < nh; a++) {
        for (size_t b = a; b > 0 && strcmp(hours[b - 1], hours[b]) > 0; b--) {
            const char *t = hours[b];
            hours[b] = hours[b - 1];
            hours[b - 1] = t;
        }
    }
    for (size_t a = 0; hours && a < nh; a++) {
        json_object_foreach(json_object_get(ctx->by_hour, hours[a]), reason, n)
        {
            printf("%s\t%s\t%" JSON_INTEGER_FORMAT "\n", hours[a], reason, json_integer_value(n));
        }
    }
    free(hours);
}

static int replay(hc_cli_t *cli, const dlq_filter_t *filter)
{
    uint64_t batch = 500;
    if (!hc_cli_u64(cli, "batch", 500, &batch) || batch == 0 || batch > 1000000) {
        hc_cli_error(cli, "--batch must be within 1..1000000");
        return HC_EXIT_USAGE;
    }
    if (!filter->reason) {
        hc_cli_error(cli, "replay needs --reason R (see `hotcount dlq list`)");
        return HC_EXIT_USAGE;
    }
    if (hc_cli_has(cli, "partition") || hc_cli_has(cli, "offset") || hc_cli_has(cli, "scan")) {
        hc_cli_error(cli, "replay reads every partition from its progress: no --partition, "
                          "--offset or --scan");
        return HC_EXIT_USAGE;
    }
    char group[512];
    snprintf(group, sizeof(group), "%s-dlq-replay", cli->cfg.group_stage1);
    const char *g = hc_cli_str(cli, "group", group);
    hc_replay_opts_t o = {
        .reason = filter->reason,
        .since_ms = filter->since == TIME_NONE ? HC_REPLAY_TIME_NONE : filter->since,
        .until_ms = filter->until == TIME_NONE ? HC_REPLAY_TIME_NONE : filter->until,
        .dry_run = hc_cli_has(cli, "dry-run"),
        .group = g,
        .transactional_id = g,
        .batch = (int64_t)batch};
    hc_replay_stats_t st;
    char errstr[512];
    hc_err_t err = hc_dlq_replay(&cli->cfg, &o, &st, errstr, sizeof(errstr));
    if (hc_cli_has(cli, "json")) {
        json_t *obj = json_pack(
            "{s:b,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "dry_run", o.dry_run, "group", g,
            "scanned", (json_int_t)st.scanned, "replayed", (json_int_t)st.replayed,
            "skipped_replayed", (json_int_t)st.skipped_replayed, "skipped_truncated",
            (json_int_t)st.skipped_truncated, "skipped_foreign", (json_int_t)st.skipped_foreign,
            "skipped_oversized", (json_int_t)st.skipped_oversized, "transactions",
            (json_int_t)st.transactions, "complete", err == HC_OK);
        char *js = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (js) {
            printf("%s\n", js);
        }
        free(js);
        json_decref(obj);
    } else {
        printf("%s %" PRId64 " of %" PRId64 " dead letters read (%" PRId64
               " already replayed, %" PRId64 " truncated, %" PRId64 " not from topic.raw, %" PRId64
               " too large to produce: skipped) in %" PRId64 " transactions%s\n",
               o.dry_run ? "would replay" : "replayed", st.replayed, st.scanned,
               st.skipped_replayed, st.skipped_truncated, st.skipped_foreign, st.skipped_oversized,
               st.transactions, err == HC_OK ? "" : "; incomplete: run it again");
    }
    if (err != HC_OK) {
        hc_cli_error(cli, "%s", errstr);
        return err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    }
    return HC_EXIT_OK;
}

int hc_cmd_dlq(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &dlq_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    dlq_ctx_t ctx = {.topic = cli.cfg.topic_dlq,
                     .filter = {NULL, TIME_NONE, TIME_NONE},
                     .json = hc_cli_has(&cli, "json")};
    uint64_t limit = 20, scan = 0, partition = 0, offset = 0;
    status = HC_EXIT_USAGE;
    if (cli.npos != 1 || (strcmp(cli.pos[0], "list") != 0 && strcmp(cli.pos[0], "show") != 0 &&
                          strcmp(cli.pos[0], "replay") != 0)) {
        hc_cli_error(&cli, "name a subcommand: list, show or replay (see --help)");
        goto done;
    }
    ctx.show = strcmp(cli.pos[0], "show") == 0;
    if (!hc_cli_u64(&cli, "count", 20, &limit) || !hc_cli_u64(&cli, "scan", 0, &scan) ||
        !hc_cli_u64(&cli, "partition", 0, &partition) || !hc_cli_u64(&cli, "offset", 0, &offset)) {
        goto done;
    }
    if (partition > INT32_MAX || offset > INT64_MAX || scan > INT64_MAX || limit == 0) {
        hc_cli_error(&cli, "--partition, --offset, --scan or -n out of range");
        goto done;
    }
    if (hc_cli_has(&cli, "offset") && !hc_cli_has(&cli, "partition")) {
        hc_cli_error(&cli, "--offset goes with --partition");
        goto done;
    }
    ctx.filter.reason = hc_cli_has(&cli, "reason") ? hc_cli_str(&cli, "reason", NULL) : NULL;
    if ((hc_cli_has(&cli, "since") &&
         !hc_cli_parse_time(hc_cli_str(&cli, "since", ""), &ctx.filter.since)) ||
        (hc_cli_has(&cli, "until") &&
         !hc_cli_parse_time(hc_cli_str(&cli, "until", ""), &ctx.filter.until))) {
        hc_cli_error(&cli, "--since/--until: a time is ms since the epoch or UTC "
                           "YYYY-MM-DD[THH:MM[:SS]][Z]");
        goto done;
    }
    if (strcmp(cli.pos[0], "replay") == 0) {
        status = replay(&cli, &ctx.filter);
        goto done;
    }
    ctx.limit = limit;
    ctx.by_reason = json_object();
    ctx.by_hour = json_object();
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(&cli.cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    if (!rk) {
        hc_cli_error(&cli, "%s", errstr);
        goto done;
    }
    int64_t scanned = 0;
    bool partial = false;
    hc_err_t err =
        hc_dead_letters_read(rk, ctx.topic, hc_cli_has(&cli, "partition") ? (int32_t)partition : -1,
                             hc_cli_has(&cli, "offset") ? (int64_t)offset : -1, (int64_t)scan,
                             on_dead_letter, &ctx, &scanned, &partial, errstr, sizeof(errstr));
    hc_kafka_reader_destroy(rk);
    if (err != HC_OK && err != HC_ERR_FULL) {
        hc_cli_error(&cli, "%s", errstr);
        status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
        goto done;
    }
    if (!ctx.show) {
        print_list(&ctx, scanned, partial);
    } else if (hc_cli_has(&cli, "offset") && ctx.matched == 0) {
        hc_cli_error(&cli, "no dead letter at %s/%d/%" PRIu64 " matches", ctx.topic, (int)partition,
                     offset);
        status = HC_EXIT_FAILED;
        goto done;
    }
    status = HC_EXIT_OK;
done:
    json_decref(ctx.by_reason);
    json_decref(ctx.by_hour);
    hc_cli_fini(&cli);
    return status;
}
