/* The commands' one wait (src/cli/cli_wait.c): it sleeps its time, it ends within a slice of
 * its stop flag being set (from another thread, as a signal handler or serve's follower stop
 * does), and a wait without an end ends only on the flag. Every bound below is a lower bound
 * or a generous upper one (seconds against a 50 ms slice), so a loaded machine cannot fail it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>

#include "cli_wait.h"
#include "hotcount/clock.h"

/* mutant: a wait that returns at once, or reports a stop it did not see */
static void waits_its_time_without_a_stop(void **state)
{
    (void)state;
    atomic_bool stop = false;
    int64_t t0 = hc_now_ms();
    assert_false(hc_cli_wait(120, &stop));
    assert_true(hc_now_ms() - t0 >= 120);
    t0 = hc_now_ms();
    assert_false(hc_cli_wait(30, NULL)); /* a plain sleep */
    assert_true(hc_now_ms() - t0 >= 30);
    assert_false(hc_cli_wait(0, NULL));
}

/* mutant: the flag looked at only after the sleep */
static void a_stop_already_set_returns_at_once(void **state)
{
    (void)state;
    atomic_bool stop = true;
    int64_t t0 = hc_now_ms();
    assert_true(hc_cli_wait(60000, &stop));
    assert_true(hc_cli_wait(-1, &stop));
    assert_true(hc_now_ms() - t0 < 5000);
}

static void *set_later(void *arg)
{
    hc_sleep_ms(100);
    atomic_store((atomic_bool *)arg, true);
    return NULL;
}

/* mutant: one sleep of the whole time (a Ctrl-C waits out the interval), or ms < 0 read as 0 */
static void a_stop_ends_the_wait_within_a_slice(void **state)
{
    (void)state;
    for (int forever = 0; forever < 2; forever++) {
        atomic_bool stop = false;
        pthread_t tid;
        int64_t t0 = hc_now_ms();
        assert_int_equal(pthread_create(&tid, NULL, set_later, &stop), 0);
        assert_true(hc_cli_wait(forever ? -1 : 60000, &stop));
        int64_t took = hc_now_ms() - t0;
        pthread_join(tid, NULL);
        assert_true(took >= 100);
        assert_true(took < 30000); /* not the 60 s, nor forever */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(waits_its_time_without_a_stop),
        cmocka_unit_test(a_stop_already_set_returns_at_once),
        cmocka_unit_test(a_stop_ends_the_wait_within_a_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
