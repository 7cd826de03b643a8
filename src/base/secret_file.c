/* Secrets read from files (include/base/hotcount/secret_file.h). */
#include "hotcount/secret_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Wipes what a failed read had already copied, so a refused secret does not linger on the heap
 * for a core dump. volatile: the compiler may not drop stores to memory about to be freed. */
static void wipe_free(char *buf, size_t len)
{
    volatile char *p = buf;

    if (buf == NULL) {
        return;
    }
    while (len-- > 0) {
        *p++ = '\0';
    }
    free(buf);
}

hc_err_t hc_secret_file_read(const char *key, const char *path, char **secret_out, char *errstr,
                             size_t errstr_size)
{
    struct stat sb;
    char *buf = NULL;
    size_t len = 0;
    hc_err_t err = HC_ERR_INVALID;
    int fd;

    *secret_out = NULL;
    if (path[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: needs the path of a file holding the secret", key);
        return HC_ERR_INVALID;
    }
    /* Symbolic links are followed: Kubernetes mounts each secret as a link into ..data/. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        hc_errstr_set(errstr, errstr_size, "%s: %s: %s", key, path, strerror(errno));
        return HC_ERR_INVALID;
    }
    /* A FIFO or a device could block the start-up or never end. */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        hc_errstr_set(errstr, errstr_size, "%s: %s is not a regular file", key, path);
        goto out_close;
    }
    if (sb.st_size > HC_SECRET_FILE_MAX) {
        hc_errstr_set(errstr, errstr_size, "%s: %s is larger than %d bytes (not a secret?)", key,
                      path, HC_SECRET_FILE_MAX);
        goto out_close;
    }
    buf = malloc(HC_SECRET_FILE_MAX + 2);
    if (buf == NULL) {
        hc_errstr_set(errstr, errstr_size, "%s: out of memory", key);
        err = HC_ERR_FATAL;
        goto out_close;
    }
    /* Read to the end, not st_size bytes: the file may grow between fstat and read. */
    for (;;) {
        ssize_t n = read(fd, buf + len, HC_SECRET_FILE_MAX + 1 - len);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            hc_errstr_set(errstr, errstr_size, "%s: %s: %s", key, path, strerror(errno));
            goto out_wipe;
        }
        if (n == 0) {
            break;
        }
        len += (size_t)n;
        if (len > HC_SECRET_FILE_MAX) {
            hc_errstr_set(errstr, errstr_size, "%s: %s is larger than %d bytes (not a secret?)",
                          key, path, HC_SECRET_FILE_MAX);
            goto out_wipe;
        }
    }
    if (memchr(buf, '\0', len) != NULL) {
        hc_errstr_set(errstr, errstr_size, "%s: %s holds a NUL byte (not shown)", key, path);
        goto out_wipe;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) {
        buf[--len] = '\0';
    }
    if (len == 0) {
        hc_errstr_set(errstr, errstr_size, "%s: %s is empty", key, path);
        goto out_wipe;
    }
    buf[len] = '\0';
    close(fd);
    *secret_out = buf;
    return HC_OK;

out_wipe:
    wipe_free(buf, HC_SECRET_FILE_MAX + 2);
out_close:
    close(fd);
    return err;
}
