# syntax=docker/dockerfile:1
#
# hotcount container image: a build stage with Debian 12's toolchain and -dev packages, and a
# runtime stage with only the shared libraries the binary links (the same Debian 12 versions the
# tests run against: librdkafka 2.0.2, libpq 15, hiredis 0.14, libmicrohttpd 0.9.75).
#
#   docker build -t hotcount:local .
#   docker run --rm hotcount:local config            # every configuration key
#   docker run --rm -v $PWD/hotcount.properties:/etc/hotcount/hotcount.properties:ro \
#       -p 9464:9464 hotcount:local stage1 -c /etc/hotcount/hotcount.properties \
#       -X instance.id=s1-0 -X metrics.listen=0.0.0.0:9464
#
# The image runs no tests: CI (tools/test) does that on the same Debian release.

############################ build ############################
FROM debian:12 AS build

# The build dependencies of tools/install-deps --build. libcmocka-dev is needed only because
# CMakeLists.txt finds it unconditionally; no test is built here.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake ninja-build pkg-config \
        librdkafka-dev libjansson-dev libsqlite3-dev libhiredis-dev libpq-dev \
        libmicrohttpd-dev libcmocka-dev libjemalloc-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# .dockerignore admits only what the build reads; CMake wants every listed source (tests and
# benchmarks included) to exist when it configures, so tests/ and bench/ come along.
COPY CMakeLists.txt ./
COPY include/ include/
COPY src/ src/
COPY tests/ tests/
COPY bench/ bench/

# RelWithDebInfo is the build type CI tests (-O2 -g); the debug info stays in the binary for
# readable core dumps and backtraces. -Werror is CI's business: a warning must not fail an image
# build. Only the hotcount target: no test binaries.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHC_WERROR=OFF \
 && cmake --build build --target hotcount \
 && install -m 0755 build/hotcount /usr/local/bin/hotcount \
 && /usr/local/bin/hotcount --help >/dev/null

############################ runtime ############################
FROM debian:12-slim AS runtime

# Runtime libraries only (tests/deploy/check_deploy.py checks that every library the binary
# links comes from one of these). ca-certificates: for kafka.security.protocol=SSL/SASL_SSL and
# PostgreSQL sslmode=verify-full.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        librdkafka1 libjansson4 libsqlite3-0 libhiredis0.14 libpq5 libmicrohttpd12 libjemalloc2 \
        ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# A fixed, numeric, unprivileged user: Kubernetes' runAsNonRoot can only verify a numeric USER,
# and the k8s manifests use the same uid/gid (10001). /var/lib/hotcount is its working
# directory, where store=sqlite:hotcount.db would land (mount a volume there to keep it).
RUN groupadd --system --gid 10001 hotcount \
 && useradd --system --uid 10001 --gid hotcount --home-dir /var/lib/hotcount --create-home \
        --shell /usr/sbin/nologin hotcount

COPY --from=build /usr/local/bin/hotcount /usr/local/bin/hotcount
COPY deploy/docker/hotcount-healthcheck /usr/local/bin/hotcount-healthcheck

USER 10001:10001
WORKDIR /var/lib/hotcount

# The Prometheus endpoint (/metrics, /healthz, /readyz). hotcount's default metrics.listen is
# 127.0.0.1:9464: set metrics.listen=0.0.0.0:9464 for anything outside the container to reach it.
EXPOSE 9464

# Liveness only (/healthz: the process serves HTTP); readiness is /readyz, for orchestrators
# that distinguish the two (the k8s manifests do). The check is a bash /dev/tcp request, so the
# image carries no curl (see deploy/docker/hotcount-healthcheck). Commands that serve no metrics
# (init, produce, get, ...) override or disable it, as docker-compose.yml does.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["hotcount-healthcheck", "/healthz"]

# stage1/stage2 stop cleanly on SIGTERM (commit or abort the open window, then exit 0); give
# them time: `docker stop -t 60`, stop_grace_period in compose, terminationGracePeriodSeconds
# in Kubernetes.
STOPSIGNAL SIGTERM
ENTRYPOINT ["hotcount"]
CMD ["--help"]
