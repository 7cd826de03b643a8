# syntax=docker/dockerfile:1
#
# hotcount container image: a build stage with Debian 12's toolchain and -dev packages, and a
# runtime stage with only the shared libraries the binary links. As on a developer's machine
# (tools/install-deps, HC_DEPS=debian-testing), librdkafka, hiredis and libmicrohttpd are built
# in the build stage from Debian testing's source packages (librdkafka 2.14, hiredis 1.2,
# libmicrohttpd 1.0) and copied into the runtime stage; the rest are Debian 12's (libpq 15,
# jansson, SQLite, jemalloc).
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

# The build dependencies of tools/install-deps --build (tests/deploy/check_deploy.py compares
# the two lists), so that its own apt-get step finds nothing missing. libcmocka-dev is needed
# only because CMakeLists.txt finds it unconditionally; no test is built here.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake ninja-build pkg-config \
        libjansson-dev libsqlite3-dev libpq-dev libcmocka-dev libjemalloc-dev \
        dpkg-dev libssl-dev libsasl2-dev zlib1g-dev libzstd-dev liblz4-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# librdkafka, hiredis and libmicrohttpd from Debian testing's source packages, as tools/install-deps builds
# them (tools/debian-source: a deb-src entry for testing, apt-get source, the upstream build),
# into /opt/hotcount; CMake links them with an rpath there.
ENV HC_CACHE_DIR=/opt/hotcount
COPY tools/install-deps tools/debian-source tools/
RUN tools/install-deps --build \
 && rm -rf /opt/hotcount/apt-testing /opt/hotcount/*.log /opt/hotcount/*.lock
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
 && /usr/local/bin/hotcount --version
# The source-built libraries' shared objects only (no headers, archives or pkg-config files), at
# the paths the binary's rpath names.
RUN mkdir -p /runtime/opt/hotcount \
 && for lib in /opt/hotcount/*/lib; do \
        mkdir -p "/runtime$lib" && cp -a "$lib"/*.so.* "/runtime$lib/"; \
    done

############################ runtime ############################
FROM debian:12-slim AS runtime

# Runtime libraries only (tests/deploy/check_deploy.py checks that every library the binary
# and the source-built libraries link comes from one of these): Debian 12's, and those that
# librdkafka 2.14 links (TLS, SASL, zstd, lz4, zlib, curl). ca-certificates: for
# kafka.security.protocol=SSL/SASL_SSL and PostgreSQL sslmode=verify-full.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libjansson4 libsqlite3-0 libpq5 libjemalloc2 \
        libssl3 libsasl2-2 libzstd1 liblz4-1 zlib1g libcurl4 \
        ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /runtime/opt/hotcount/ /opt/hotcount/

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
