/* See include/base/hotcount/listen.h. */
#include "hotcount/listen.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hotcount/err.h"

/* Splits "host:port" or "[v6]:port" (the last colon, so an unbracketed IPv6 host also works).
 * The port: 0..65535, 0 meaning any free port. */
static bool split_listen(const char *addr, char *host, size_t host_size, char *port,
                         size_t port_size)
{
    const char *colon;
    const char *host_start = addr;
    size_t host_len;

    if (addr[0] == '[') {
        const char *close_bracket = strchr(addr, ']');
        if (!close_bracket || close_bracket[1] != ':') {
            return false;
        }
        host_start = addr + 1;
        host_len = (size_t)(close_bracket - host_start);
        colon = close_bracket + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) {
            return false;
        }
        host_len = (size_t)(colon - addr);
    }
    const char *digits = colon + 1;
    size_t n = strspn(digits, "0123456789");
    if (host_len == 0 || host_len >= host_size || n == 0 || n > 5 || digits[n] != '\0' ||
        n >= port_size || strtol(digits, NULL, 10) > 65535) {
        return false;
    }
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
    memcpy(port, digits, n + 1);
    return true;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
}

int hc_listen_open(const char *key, const char *addr, int backlog, int *family, int *port_out,
                   char *errstr, size_t errstr_size)
{
    char host[256];
    char port[8];
    if (!split_listen(addr, host, sizeof(host), port, sizeof(port))) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: \"%s\" is not host:port or [ipv6]:port with a port in 0..65535", key,
                      addr);
        return -1;
    }
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        hc_errstr_set(errstr, errstr_size, "%s: cannot resolve host \"%s\": %s", key, host,
                      gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    int saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        /* Restarts must not wait out TIME_WAIT; a port another socket listens on still fails. */
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *family = ai->ai_family;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (saved == EADDRINUSE) {
            hc_errstr_set(errstr, errstr_size,
                          "%s: cannot listen on %s: the port is already in use (stop the other "
                          "process or pick another port)",
                          key, addr);
        } else {
            hc_errstr_set(errstr, errstr_size, "%s: cannot listen on %s: %s", key, addr,
                          strerror(saved));
        }
    }
    if (fd >= 0) {
        *port_out = bound_port(fd);
    }
    return fd;
}
