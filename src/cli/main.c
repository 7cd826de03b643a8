/* hotcount: argv -> the command table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/kafka.h"
#include "hotcount/store.h"

/* jemalloc's options, read at its start when the binary links it (HC_ALLOCATOR; libc's
 * allocator ignores the symbol); MALLOC_CONF in the environment overrides them. Freed pages
 * go back to the kernel over 1 s instead of jemalloc's 10: librdkafka's fetch buffers and
 * consumed messages are freed in bulk, and at 10 s about 70 MB of them stayed resident in
 * stage 1 whatever max.keys said (hotcount_memory_resident_bytes minus
 * hotcount_memory_allocated_bytes; 27-39 MB at 1 s, same CPU within the noise:
 * docs/OPERATIONS.md "Memory"). */
extern const char *malloc_conf;
const char *malloc_conf = "dirty_decay_ms:1000";

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command_t;

static const command_t commands[] = {
    {"demo", hc_cmd_demo, "everything in one process on an in-process Kafka and SQLite"},
    {"stage1", hc_cmd_stage1, "run stage 1 (likes.raw -> likes.partials) until SIGINT/SIGTERM"},
    {"stage2", hc_cmd_stage2, "run stage 2 (likes.partials -> store) until SIGINT/SIGTERM"},
    {"run", hc_cmd_run, "run both stages in one process"},
    {"produce", hc_cmd_produce, "load generator: Zipfian like events into likes.raw"},
    {"init", hc_cmd_init, "create the topics and the store schema (safe to repeat)"},
    {"get", hc_cmd_get, "print the count of each POST"},
    {"top", hc_cmd_top, "print the N largest counts"},
    {"verify", hc_cmd_verify, "recount likes.raw and compare every post with the store"},
    {"mock-broker", hc_cmd_mock_broker, "a stand-alone in-process Kafka on localhost"},
    {"config", hc_cmd_config, "print an example configuration file with every key"},
    {"metrics", hc_cmd_metrics, "list the metrics the stages and serve expose"},
    {"serve", hc_cmd_serve, "HTTP read API over the store, with a live page"},
    {"status", hc_cmd_status, "health of both stages, their lag, the store and the DLQ"},
    {"dlq", hc_cmd_dlq, "list or show the dead letters in topic.dlq"},
    {"hotkeys", hc_cmd_hotkeys, "list the hot posts (topic.hotkeys); declare or undeclare one"},
};

static void usage(FILE *out)
{
    char stores[256];

    hc_store_facts_list(hc_store_facts(), HC_STORE_LIST_TITLES, stores, sizeof(stores));
    fprintf(out,
            "usage: hotcount <command> [-c FILE] [-X key=value]... [options]\n\n"
            "hotcount pre-aggregates like events from Kafka in two stages and writes one\n"
            "combined delta per post per flush to %s,\nexactly once.\n\ncommands:\n",
            stores);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    }
    fprintf(out, "\n`hotcount <command> --help` describes each command's options;\n"
                 "`hotcount --version` prints the versions of hotcount and its libraries.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return HC_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return HC_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        return hc_cmd_version(argc - 1, argv + 1);
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            int status = commands[i].run(argc - 1, argv + 1);
            char why[512];
            if (status != HC_EXIT_OK && hc_kafka_auth_failures(why, sizeof(why)) > 0) {
                /* the cause behind a command's timeout: the last line names broker and cause */
                fprintf(stderr, "hotcount: %s\n", why);
            }
            return status;
        }
    }
    fprintf(stderr, "hotcount: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return HC_EXIT_USAGE;
}
