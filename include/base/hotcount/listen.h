/* Layer: base. Listening sockets for hotcount's HTTP endpoints (metrics.listen, serve.listen),
 * opened by hotcount rather than by libmicrohttpd so that a bad address or a port in use is
 * reported with its cause and the config key, and so that port 0 (any free port) can be read
 * back. */
#ifndef HOTCOUNT_LISTEN_H
#define HOTCOUNT_LISTEN_H

#include <stddef.h>

/* A listening, non-blocking, close-on-exec socket on the first address of addr ("host:port" or
 * "[v6]:port"; port 0..65535, 0 for any free port) that binds, with SO_REUSEADDR. Returns the
 * fd with *family (AF_INET or AF_INET6) and *port (the bound port) set, or -1 with errstr naming
 * key, addr and the cause. */
int hc_listen_open(const char *key, const char *addr, int backlog, int *family, int *port,
                   char *errstr, size_t errstr_size);

#endif
