/* hotcount --version: hotcount's version and the version of every library the process runs
 * with, as loaded, not as compiled against: an rpath that points nowhere or an LD_LIBRARY_PATH
 * makes the two differ, and then both are printed. Each line is "NAME VERSION (details)"; the
 * details name the file the library was loaded from. The CLI calls the libraries' version
 * functions itself: they are the only calls here, and no layer has a reason to wrap them. */
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <microhttpd.h>
#include <sqlite3.h>

#include "cli.h"
#include "cmds.h"

#ifndef HC_VERSION
#define HC_VERSION "unknown"
#endif

/* jemalloc's control call, when the executable links jemalloc (HC_ALLOCATOR); weak, so a
 * build with libc's allocator links without it and sees NULL. */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

/* The file of the shared object that holds FN. ISO C has no conversion from a function
 * pointer to the object pointer dladdr wants; POSIX guarantees they have the same
 * representation, so copy the bits. */
static const char *object_of(void (*fn)(void))
{
    void *addr;
    Dl_info info;
    memcpy(&addr, &fn, sizeof(addr));
    if (dladdr(addr, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == '\0') {
        return "?";
    }
    return info.dli_fname;
}
#define HC_FN(fn) ((void (*)(void))(fn))

static void print_lib(const char *name, const char *runtime, const char *built, const char *file,
                      const char *extra)
{
    printf("%s %s (", name, runtime);
    if (built != NULL && strcmp(built, runtime) != 0) {
        printf("built with %s, ", built);
    }
    printf("%s%s%s)\n", file, extra[0] != '\0' ? "; " : "", extra);
}

static void print_rdkafka(void)
{
    char built[32];
    char features[512] = "";
    size_t features_size = sizeof(features);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();

    snprintf(built, sizeof(built), "%d.%d.%d", (RD_KAFKA_VERSION >> 24) & 0xff,
             (RD_KAFKA_VERSION >> 16) & 0xff, (RD_KAFKA_VERSION >> 8) & 0xff);
    char extra[sizeof(features) + 32] = "";
    if (conf != NULL &&
        rd_kafka_conf_get(conf, "builtin.features", features, &features_size) == RD_KAFKA_CONF_OK) {
        snprintf(extra, sizeof(extra), "builtin.features=%s", features);
    }
    rd_kafka_conf_destroy(conf);
    print_lib("librdkafka", rd_kafka_version_str(), built, object_of(HC_FN(rd_kafka_version_str)),
              extra);
}

static void print_versions(void)
{
    char buf[64];
    char built[64];

    printf("hotcount %s\n", HC_VERSION);
    print_rdkafka();

    print_lib("jansson", jansson_version_str(), JANSSON_VERSION,
              object_of(HC_FN(jansson_version_str)), "");

    /* hiredis has no version call: the headers' version, and the file, whose name carries
     * the SONAME's version. */
    snprintf(buf, sizeof(buf), "%d.%d.%d", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    print_lib("hiredis", buf, NULL, object_of(HC_FN(redisConnect)),
              "the headers' version: hiredis has no version call");

    int pq = PQlibVersion();
    snprintf(buf, sizeof(buf), "%d.%d", pq / 10000, pq % 10000);
    print_lib("libpq", buf, NULL, object_of(HC_FN(PQlibVersion)), "");

    print_lib("SQLite", sqlite3_libversion(), SQLITE_VERSION, object_of(HC_FN(sqlite3_libversion)),
              "");

    snprintf(built, sizeof(built), "%x.%x.%x", (unsigned)(MHD_VERSION >> 24) & 0xffu,
             (unsigned)(MHD_VERSION >> 16) & 0xffu, (unsigned)(MHD_VERSION >> 8) & 0xffu);
    print_lib("libmicrohttpd", MHD_get_version(), built, object_of(HC_FN(MHD_get_version)), "");

    const char *je = NULL;
    size_t je_size = sizeof(je);
    if (mallctl != NULL && mallctl("version", (void *)&je, &je_size, NULL, 0) == 0 && je != NULL) {
        print_lib("jemalloc", je, NULL, object_of(HC_FN(mallctl)), "the allocator");
    } else {
        print_lib("glibc", gnu_get_libc_version(), NULL, object_of(HC_FN(gnu_get_libc_version)),
                  "the allocator");
    }
}

int hc_cmd_version(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "hotcount: --version takes no arguments\n");
        return HC_EXIT_USAGE;
    }
    print_versions();
    return HC_EXIT_OK;
}
