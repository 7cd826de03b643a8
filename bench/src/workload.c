#include "workload.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hotcount/salt.h"

void bench_workload_init(bench_workload_t *w, const bench_workload_opts_t *opts)
{
    memset(w, 0, sizeof(*w));
    w->o = *opts;
    if (w->o.salts == 0) {
        w->o.salts = 16;
    }
    if (!(w->o.base_rate > 0)) {
        w->o.base_rate = 100000;
    }
    if (w->o.uniform) {
        w->o.celeb_rate = 0;
    }
    hc_rng_init(&w->rng, opts->seed);
    hc_zipf_init(&w->zipf, opts->posts, opts->zipf_s > 0 ? opts->zipf_s : 1.0);
    /* The base traffic alone would last events / base_rate; the burst sits in its middle fifth. */
    double duration = (double)opts->events / w->o.base_rate;
    w->burst_from = duration * 0.4;
    w->burst_len = duration * 0.2;
}

/* The celebrity's virtual rate at time t: a trapezoid over the burst window. */
static double celeb_rate_at(const bench_workload_t *w, double t)
{
    double x = (t - w->burst_from) / w->burst_len;
    if (w->o.celeb_rate <= 0 || x <= 0 || x >= 1) {
        return 0;
    }
    double shape = x < 0.25 ? x / 0.25 : x > 0.75 ? (1 - x) / 0.25 : 1;
    return w->o.celeb_rate * shape;
}

bool bench_workload_next(bench_workload_t *w, char *key, size_t *key_len, char *value,
                         size_t *value_len, bool *celeb)
{
    if (w->seq >= w->o.events) {
        return false;
    }
    double r = celeb_rate_at(w, w->t);
    double total = w->o.base_rate + r;
    bool is_celeb = r > 0 && hc_rng_double(&w->rng) * total < r;
    char post[32];
    int post_len;
    bool quoted = true;
    if (is_celeb) {
        post_len = snprintf(post, sizeof(post), "%s", BENCH_CELEB_POST);
    } else {
        /* uniform: a stride coprime with powers of ten visits every post once per `posts`
         * events, in a scattered order, so the window's live keys are exactly min(events,
         * posts) */
        uint64_t rank = w->o.uniform ? 1 + (w->seq * 2654435761u) % w->o.posts
                                     : hc_zipf_sample(&w->zipf, &w->rng);
        post_len = snprintf(post, sizeof(post), "%" PRIu64, rank);
        /* both spellings of a numeric post id, as producers write them */
        quoted = (w->seq & 1) == 0;
    }
    char user[24];
    int user_len = snprintf(user, sizeof(user), "u%07" PRIu64, hc_rng_below(&w->rng, 10000000));
    bool unlike = !is_celeb && hc_rng_double(&w->rng) < w->o.unlike_ratio;
    uint64_t a = hc_rng_next(&w->rng);
    uint64_t b = hc_rng_next(&w->rng);
    int64_t ts = w->o.start_ms + (int64_t)(w->t * 1000.0);
    const char *q = quoted ? "\"" : "";
    /* an unknown field, as real producers add them: the parser must still validate it */
    static const char *const apps[] = {"ios", "android", "web"};
    int n =
        snprintf(value, BENCH_VALUE_MAX,
                 "{\"post_id\":%s%.*s%s,\"user_id\":\"%.*s\",\"op\":\"%s\",\"ts\":%" PRId64
                 ",\"app\":\"%s\",\"event_id\":\"%08" PRIx64 "-%04" PRIx64 "-4%03" PRIx64
                 "-a%03" PRIx64 "-%012" PRIx64 "\"}",
                 q, post_len, post, q, user_len, user, unlike ? "unlike" : "like", ts, apps[a % 3],
                 a >> 32, (a >> 16) & 0xffff, a & 0xfff, b >> 52, b & 0xffffffffffffu);
    *value_len = (size_t)n;
    uint32_t salt = hc_salt(user, (size_t)user_len, w->o.salts);
    *key_len = hc_salt_key(key, BENCH_KEY_MAX, post, (size_t)post_len, salt);
    *celeb = is_celeb;
    if (is_celeb) {
        w->celeb_events++;
    }
    w->t += 1.0 / total;
    w->seq++;
    return true;
}
