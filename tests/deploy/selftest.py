#!/usr/bin/env python3
"""The checker's own test: breaks the deployment files one way at a time, in a scratch copy of
the tree, and expects tests/deploy/check_deploy.py to fail on each break (and to pass on the
unbroken copy). A checker that passes everything would pass this test never.

    python3 tests/deploy/selftest.py HOTCOUNT

Each mutation replaces one exact string in one file; when a file changes so that the string is
gone, the mutation fails loudly ("does not apply") and must be updated with the file. Mutations
that only promtool or systemd-analyze can catch are skipped when the tool is missing.
Prints `deploy-selftest: N passed, N failed, N skipped`; exit 1 on any failure.
"""

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# What check_deploy.py reads (CMakeLists.txt and the sources: the Dockerfile's build-context
# check compares them with .dockerignore).
TREE = ["Dockerfile", ".dockerignore", "docker-compose.yml", "CMakeLists.txt", "deploy",
        "tests/deploy", "include", "src", "tests", "bench", "tools"]

COMPOSE = "docker-compose.yml"
PROPS = "deploy/compose/hotcount.properties"
ALERTS = "deploy/prometheus/alerts.yml"
DASH = "deploy/grafana/dashboards/hotcount.json"

# (name, file, old, new, tool needed to catch it or None)
MUTATIONS = [
    # metric names and labels against the metric registry (include/obs/hotcount/metric_defs.h)
    ("alert uses an unknown metric", ALERTS, "hotcount_partials_total", "hotcount_partial_total", None),
    ("alert uses an unknown label value", ALERTS, 'outcome="abort"', 'outcome="aborted"', None),
    ("alert uses an unknown label", ALERTS, 'result="invalid"', 'reslt="invalid"', None),
    ("alert without a runbook", ALERTS, "          runbook:", "          runbook_url:", None),
    ("dashboard uses an unknown metric", DASH, "hotcount_consumer_lag", "hotcount_consumer_lags", None),
    ("dashboard queries a histogram without _bucket", DASH, "hotcount_flush_seconds_bucket",
     "hotcount_flush_seconds", None),
    # PromQL and alert behaviour
    ("alert PromQL does not parse", ALERTS, "expr: hotcount_ready == 0", "expr: hotcount_ready == (0",
     "promtool"),
    ("alert threshold no longer matches its tests", ALERTS, "> 10000\n", "> 100000\n", "promtool"),
    ("dashboard PromQL does not parse", DASH, "topk(20,", "topk(20,,", "promtool"),
    # hotcount configuration, through --check-config
    ("compose: unknown configuration key", PROPS, "flush.ms=1000", "flush.msec=1000", None),
    ("compose: metrics on loopback", PROPS, "metrics.listen=0.0.0.0:9464", "metrics.listen=127.0.0.1:9464",
     None),
    ("k8s: out-of-range value", "deploy/k8s/configmap.yaml", "    flush.ms=1000", "    flush.ms=5", None),
    ("systemd: unknown store scheme", "deploy/systemd/hotcount.properties", "store=postgresql://",
     "store=mysql://", None),
    # compose structure
    ("compose: two replicas share an instance.id", COMPOSE, "instance.id=stage1-b", "instance.id=stage1-a",
     None),
    ("compose: duplicate key", COMPOSE, "    hostname: kafka\n", "    hostname: kafka\n    hostname: kafka2\n",
     None),
    ("compose: depends on a missing service", COMPOSE,
     "      postgres:\n        condition: service_healthy\n      # with",
     "      postgress:\n        condition: service_healthy\n      # with", None),
    ("compose: Redis without AOF", COMPOSE, '      - --appendonly\n      - "yes"\n', "", None),
    ("compose: transaction log needs 2 replicas", COMPOSE, "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: 1",
     "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: 2", None),
    ("compose: short stop grace", COMPOSE, "stop_grace_period: 60s", "stop_grace_period: 10s", None),
    ("prometheus: scrapes the wrong port", "deploy/prometheus/prometheus.yml", '"stage2:9464"',
     '"stage2:9465"', None),
    # Kubernetes
    ("k8s: instance.id without POD_NAME", "deploy/k8s/stage1.yaml",
     "            - name: POD_NAME\n              valueFrom:\n                fieldRef:\n"
     "                  fieldPath: metadata.name\n", "", None),
    ("k8s: readiness on /healthz", "deploy/k8s/stage2.yaml", "path: /readyz", "path: /healthz", None),
    ("k8s: selector misses the pods", "deploy/k8s/stage1.yaml",
     "      app.kubernetes.io/component: stage1\n  template:",
     "      app.kubernetes.io/component: stage-1\n  template:", None),
    ("k8s: short grace period", "deploy/k8s/stage2.yaml", "terminationGracePeriodSeconds: 60",
     "terminationGracePeriodSeconds: 30", None),
    # systemd
    ("systemd: instance without instance.id", "deploy/systemd/hotcount-stage2@.service",
     " -X instance.id=%i", "", None),
    ("systemd: invalid setting", "deploy/systemd/hotcount-stage1@.service", "ProtectSystem=strict\n",
     "ProtectSystem=strict\nProtectClock=maybe\n", "systemd-analyze"),
    # Dockerfile and build context
    ("Dockerfile: runtime lacks libpq5", "Dockerfile", "libsqlite3-0 libpq5 ", "libsqlite3-0 ", None),
    ("Dockerfile: build lacks a source build's -dev package", "Dockerfile", " libzstd-dev ", " ", None),
    ("Dockerfile: runtime lacks librdkafka's libzstd1", "Dockerfile", " libzstd1 ", " ", None),
    ("Dockerfile: source builds not copied", "Dockerfile",
     "COPY --from=build /runtime/opt/hotcount/ /opt/hotcount/\n", "", None),
    ("Dockerfile: runs as root", "Dockerfile", "USER 10001:10001", "USER root", None),
    ("Dockerfile: build stage runs tests", "Dockerfile", "--target hotcount \\",
     "--target hotcount && ctest --test-dir build \\", None),
    (".dockerignore drops src/", ".dockerignore", "!src/\n", "", None),
    (".dockerignore drops one source", ".dockerignore", "**/*.db\n", "**/*.db\nsrc/store/pgsql/pgsql.c\n", None),
]


def scratch_tree():
    d = tempfile.mkdtemp(prefix="hc-deploy-selftest-")
    for f in TREE:
        src, dst = os.path.join(ROOT, f), os.path.join(d, f)
        if not os.path.exists(src) or os.path.exists(dst):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.db"))
        else:
            shutil.copy(src, dst)
    return d


def run_checker(tree, hotcount):
    p = subprocess.run([sys.executable, os.path.join(tree, "tests", "deploy", "check_deploy.py"), hotcount],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def one(hotcount, mutation):
    name, path, old, new, _ = mutation
    tree = scratch_tree()
    try:
        if mutation is not None and path:
            full = os.path.join(tree, path)
            with open(full, encoding="utf-8") as f:
                text = f.read()
            if old not in text:
                return name, False, f"does not apply: {old!r} is no longer in {path}; update selftest.py"
            with open(full, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
        rc, out = run_checker(tree, hotcount)
        fails = [ln.strip() for ln in out.splitlines() if ln.startswith("     ")]
        last = out.strip().splitlines()[-1:] or [""]
        return name, rc, fails[0] if fails else last[0]
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: selftest.py HOTCOUNT\n")
        return 2
    hotcount = os.path.abspath(sys.argv[1])
    passed = failed = skipped = 0

    name, rc, detail = one(hotcount, ("unchanged tree passes", None, None, None, None))
    if rc == 0:
        passed += 1
        print(f"ok      {name}")
    else:
        failed += 1
        print(f"FAIL    {name}: the checker fails the unchanged files: {detail}")

    todo = []
    for m in MUTATIONS:
        if m[4] and not shutil.which(m[4]):
            skipped += 1
            print(f"SKIPPED {m[0]}: needs {m[4]}")
        else:
            todo.append(m)
    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for name, rc, detail in pool.map(lambda m: one(hotcount, m), todo):
            if rc is False:
                failed += 1
                print(f"FAIL    {name}: {detail}")
            elif rc == 1:
                passed += 1
                print(f"ok      {name}: caught: {detail[:140]}")
            else:
                failed += 1
                print(f"FAIL    {name}: the checker exited {rc} instead of failing: {detail[:200]}")
    print(f"deploy-selftest: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
