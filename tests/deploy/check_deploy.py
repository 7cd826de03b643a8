#!/usr/bin/env python3
"""Checks hotcount's deployment files without running them (there is no Docker engine or
Kubernetes cluster in CI): it parses them, checks what they promise against each other and
against the code, and hands each hotcount configuration to the binary itself.

    python3 tests/deploy/check_deploy.py HOTCOUNT [--strict]

HOTCOUNT is the built binary (build/hotcount). What is checked:

  * YAML: every file under deploy/ and docker-compose.yml parses (all documents; duplicate
    keys are errors, which PyYAML would otherwise accept silently).
  * Configurations: every hotcount invocation in docker-compose.yml, deploy/k8s and
    deploy/systemd, with its properties file and -X flags, goes through
    `HOTCOUNT <stage1|stage2|run> --check-config` and must print "configuration ok".
  * Metric names: every metric in deploy/prometheus/alerts.yml and in the Grafana dashboard's
    queries is in the metric registry, include/obs/hotcount/metric_defs.h (histograms with their
    _bucket/_sum/_count series), label names exist on that metric, and label values of the
    enumerated labels (result, outcome, stage) are ones the table lists.
  * Runbook links: every alert of alerts.yml has a runbook_url annotation ending in
    docs/RUNBOOK.md#ANCHOR; docs/RUNBOOK.md has that anchor (<a id="ANCHOR"></a>), and the
    entry it opens (its next "## " heading) names the alert.
  * PromQL: `promtool check rules` on alerts.yml, `promtool check config` on prometheus.yml,
    `promtool test rules` on alerts_test.yml (on a copy of alerts.yml without annotations),
    and `promtool check rules` on the dashboard's queries wrapped as recording rules.
  * Structure: compose services, dependencies, health checks, volumes, Kafka/Redis/PostgreSQL
    settings, scrape targets; Dockerfile stages, packages, user, port, health check, entry
    point, build context; Kubernetes objects, selectors, probes, downward-API instance ids,
    grace periods, disruption budgets, the PodMonitor; systemd units' settings and
    `systemd-analyze verify`; the shared libraries of HOTCOUNT against the image's runtime
    packages.

promtool (Debian package `prometheus`) and systemd-analyze are optional: without them their
checks are skipped with a loud warning, unless --strict (or HC_DEPLOY_STRICT=1) makes a missing
tool a failure. Exit status 0 when everything passed, 1 on any failure, 2 on bad usage.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # pragma: no cover - reported, not raised
    sys.stderr.write("check_deploy: PyYAML is missing: pip install -r tests/deploy/requirements.txt\n")
    sys.exit(2)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

STAGE_VERBS = ("stage1", "stage2", "run")  # the commands that take --check-config
# Labels that the scrape adds (compose static labels, PodMonitor relabeling, Kubernetes SD).
TARGET_LABELS = {"job", "instance", "role", "namespace", "pod", "container", "service", "endpoint"}

# ---------------------------------------------------------------------------------------------
# reporting


class Report:
    """Collects results: one named check passes when it recorded no failure."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self._problems = []

    def check(self, name):
        return _Check(self, name)

    def fail(self, where, msg):
        self._problems.append(f"{rel(where)}: {msg}" if where else msg)

    def skip(self, name, why):
        self.skipped += 1
        bar = "!" * 78
        print(f"{bar}\nSKIPPED: {name}: {why}\n{bar}", flush=True)


class _Check:
    def __init__(self, report, name):
        self.report = report
        self.name = name

    def __enter__(self):
        self.report._problems = []
        return self.report

    def __exit__(self, exc_type, exc, tb):
        r = self.report
        if exc_type is not None:
            r._problems.append(f"internal error: {exc_type.__name__}: {exc}")
        if r._problems:
            r.failed += 1
            print(f"FAIL {self.name}", flush=True)
            for p in r._problems:
                print(f"     {p}", flush=True)
        else:
            r.passed += 1
            print(f"ok   {self.name}", flush=True)
        r._problems = []
        return True  # an exception inside one check fails that check only


def rel(path):
    if isinstance(path, str) and os.path.isabs(path) and path.startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return path


def repo(*parts):
    return os.path.join(ROOT, *parts)


# ---------------------------------------------------------------------------------------------
# YAML with duplicate-key detection


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (merge keys `<<` excepted: overriding a
    merged key is how anchors are meant to be used)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or key_node.value == "<<":
                continue
            if isinstance(key_node, yaml.ScalarNode):
                key = key_node.value
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=StrictLoader) if d is not None]


def load_yaml(path):
    docs = load_yaml_all(path)
    if len(docs) != 1:
        raise ValueError(f"expected one YAML document, found {len(docs)}")
    return docs[0]


# ---------------------------------------------------------------------------------------------
# hotcount configuration


def parse_properties(text):
    """hotcount's properties format: key=value lines, '#' or '!' comments."""
    props = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        if "=" in s:
            k, v = s.split("=", 1)
            props[k.strip()] = v.strip()
    return props


class Invocation:
    """One hotcount command line from a deployment file, ready for --check-config."""

    def __init__(self, where, verb, config_text, overrides, config_label):
        self.where = where  # "docker-compose.yml service stage1-a", ...
        self.verb = verb
        self.config_text = config_text  # None: no -c file
        self.overrides = overrides  # ["key=value", ...] in order
        self.config_label = config_label

    def effective(self):
        props = parse_properties(self.config_text or "")
        for kv in self.overrides:
            k, _, v = kv.partition("=")
            props[k] = v
        return props


def split_hotcount_args(args):
    """Returns (verb, config path or None, [-X key=value...], other options)."""
    if not args:
        return None, None, [], []
    verb, rest = args[0], list(args[1:])
    cfg, xs, other = None, [], []
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-c", "--config") and i + 1 < len(rest):
            cfg = rest[i + 1]
            i += 2
        elif a == "-X" and i + 1 < len(rest):
            xs.append(rest[i + 1])
            i += 2
        elif a.startswith("--config="):
            cfg = a.split("=", 1)[1]
            i += 1
        elif a.startswith("-X") and len(a) > 2:
            xs.append(a[2:])
            i += 1
        else:
            other.append(a)
            i += 1
    return verb, cfg, xs, other


def run_check_config(rep, hotcount, inv):
    """`hotcount <verb> --check-config`; commands without that option (init, produce, ...) are
    checked through `run`, which reads the same configuration keys."""
    verb = inv.verb if inv.verb in STAGE_VERBS else "run"
    with tempfile.TemporaryDirectory(prefix="hc-deploy-") as tmp:
        cmd = [hotcount, verb, "--check-config"]
        if inv.config_text is not None:
            path = os.path.join(tmp, "hotcount.properties")
            with open(path, "w", encoding="utf-8") as f:
                f.write(inv.config_text)
            cmd += ["-c", path]
        for kv in inv.overrides:
            cmd += ["-X", kv]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as e:
            rep.fail(None, f"{inv.where}: cannot run {hotcount}: {e}")
            return
    shown = " ".join(shlex.quote(c) for c in [rel(hotcount), verb, "--check-config"]
                     + (["-c", inv.config_label] if inv.config_text is not None else [])
                     + [x for kv in inv.overrides for x in ("-X", kv)])
    if p.returncode != 0 or "configuration ok" not in p.stdout:
        msg = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["(no output)"])
        msg = [m for m in msg if "CONFWARN" not in m] or msg
        rep.fail(None, f"{inv.where}: `{shown}` exited {p.returncode}: {msg[-1]}")


def listen_port(value):
    m = re.match(r"^(?:\[[^\]]*\]|[^:]*):(\d+)$", value or "")
    return int(m.group(1)) if m else None


def listen_host(value):
    m = re.match(r"^(\[[^\]]*\]|[^:]*):\d+$", value or "")
    return m.group(1) if m else None


# ---------------------------------------------------------------------------------------------
# the metric registry and PromQL scanning


def parse_metrics_table(hotcount):
    """{name: {"type": ..., "labels": {label: set(values) or None}}} from the metric registry
    (include/obs/hotcount/metric_defs.h), as `hotcount metrics --markdown` prints it."""
    text = subprocess.run([hotcount, "metrics", "--markdown"], check=True, capture_output=True,
                          text=True).stdout
    metrics = {}
    for line in text.splitlines():
        m = re.match(r"^\|\s*`?(hotcount_[A-Za-z0-9_]+)`?\s*\|", line)
        if not m:
            continue
        cells = [c.strip().replace("`", "") for c in re.split(r"(?<!\\)\|", line.strip())]
        # ['', name, type, labels, meaning, '']
        cells = cells[1:-1] if cells and cells[0] == "" else cells
        name, mtype, labels_cell = cells[0], cells[1], cells[2]
        labels = {}
        for part in [p.strip() for p in labels_cell.split(",") if p.strip()]:
            lm = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", part)
            if not lm:
                continue
            values = set(re.findall(r'"([^"]*)"', lm.group(2))) if lm.group(2) else None
            labels[lm.group(1)] = values
        metrics[name] = {"type": mtype, "labels": labels}
    return metrics


PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                   "group_left", "group_right", "inf", "nan", "atan2", "start", "end"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<num>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)(?:[a-zA-Z]+\d*)*)
  | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@:])
""", re.X)


def tokenize(expr):
    toks, pos = [], 0
    while pos < len(expr):
        m = TOKEN_RE.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read PromQL at {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            toks.append((m.lastgroup, m.group()))
    return toks


def selectors(expr):
    """Vector selectors in a PromQL expression: [(metric name, [(label, op, value)])]."""
    toks = tokenize(expr)
    out = []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        if kind == "op" and text == "[":  # range or subquery: durations, skip
            depth = 1
            i += 1
            while i < len(toks) and depth:
                depth += {"[": 1, "]": -1}.get(toks[i][1], 0) if toks[i][0] == "op" else 0
                i += 1
            continue
        if kind == "ident" and text in GROUPING:
            # by (...), on (...), group_left (...): label lists
            if i + 1 < len(toks) and toks[i + 1] == ("op", "("):
                j = i + 2
                while j < len(toks) and toks[j] != ("op", ")"):
                    j += 1
                i = j + 1
            else:
                i += 1
            continue
        if kind == "ident" and (text in PROMQL_KEYWORDS):
            i += 1
            continue
        if kind == "ident" and i + 1 < len(toks) and (
                toks[i + 1] == ("op", "(") or (toks[i + 1][0] == "ident" and toks[i + 1][1] in GROUPING)):
            i += 1  # a function, or an aggregation (`sum (...)`, `sum by (...) (...)`)
            continue
        if kind == "ident" or (kind == "op" and text == "{"):
            name = text if kind == "ident" else None
            j = i + 1 if kind == "ident" else i
            matchers = []
            if j < len(toks) and toks[j] == ("op", "{"):
                j += 1
                while j < len(toks) and toks[j] != ("op", "}"):
                    if toks[j][0] in ("ident", "str") and j + 2 < len(toks) and toks[j + 1][0] == "op" \
                            and toks[j + 1][1] in ("=", "!=", "=~", "!~") and toks[j + 2][0] == "str":
                        label = toks[j][1].strip('"')
                        value = bytes(toks[j + 2][1][1:-1], "utf-8").decode("unicode_escape")
                        if label == "__name__" and toks[j + 1][1] == "=":
                            name = value
                        else:
                            matchers.append((label, toks[j + 1][1], value))
                        j += 3
                    else:
                        j += 1
                j += 1
            if name is not None:
                out.append((name, matchers))
            i = j
            continue
        i += 1
    return out


def check_expr_metrics(rep, where, expr, metrics, recorded, allow_up=True):
    try:
        sels = selectors(expr)
    except ValueError as e:
        rep.fail(where, str(e))
        return set()
    used = set()
    for name, matchers in sels:
        used.add(name)
        if name in recorded:
            continue
        if allow_up and name == "up":
            known = {lbl: None for lbl in TARGET_LABELS}
            base, suffix = name, ""
        else:
            base, suffix = name, ""
            if name not in metrics:
                for sfx in ("_bucket", "_sum", "_count"):
                    if name.endswith(sfx) and name[: -len(sfx)] in metrics \
                            and metrics[name[: -len(sfx)]]["type"] == "histogram":
                        base, suffix = name[: -len(sfx)], sfx
                        break
                else:
                    rep.fail(where, f"metric {name!r} is not in the metric registry (include/obs/hotcount/metric_defs.h)")
                    continue
            elif metrics[name]["type"] == "histogram":
                rep.fail(where, f"histogram {name!r} has no series of that name: use {name}_bucket, "
                                f"_sum or _count")
                continue
            known = dict(metrics[base]["labels"])
            for lbl in TARGET_LABELS:
                known.setdefault(lbl, None)
            if suffix == "_bucket":
                known["le"] = None
        for label, op, value in matchers:
            if label not in known:
                rep.fail(where, f"{name}: label {label!r} does not exist on it "
                                f"(the registry lists: {', '.join(sorted(metrics[base]['labels'])) or 'none'})")
                continue
            allowed = known[label]
            if not allowed or "$" in value:
                continue
            if op == "=" and value not in allowed:
                rep.fail(where, f'{name}{{{label}="{value}"}}: the registry lists only '
                                f'{", ".join(sorted(allowed))}')
            elif op == "=~" and re.fullmatch(r"[A-Za-z0-9_.|-]+", value):
                for alt in value.split("|"):
                    if alt not in allowed:
                        rep.fail(where, f'{name}{{{label}=~"{value}"}}: {alt!r} is not one of '
                                        f'{", ".join(sorted(allowed))}')
    return used


# ---------------------------------------------------------------------------------------------
# tools


def which(tool):
    return shutil.which(tool)


# Per source package that tools/install-deps can build from Debian testing (its hc_source_deps
# line, HC_DEPS=debian-testing): Debian 12's runtime package of that library, and the runtime
# packages the source build links.
SOURCE_BUILDS = {
    "librdkafka": ("librdkafka1", {"libssl3", "libsasl2-2", "libzstd1", "liblz4-1", "zlib1g",
                                   "libcurl4"}),
    "hiredis": ("libhiredis0.14", set()),
    "libmicrohttpd": ("libmicrohttpd12", set()),
}


def install_deps_default():
    """The default of tools/install-deps' HC_DEPS switch (its `: "${HC_DEPS:=...}"` line)."""
    with open(repo("tools", "install-deps"), encoding="utf-8") as f:
        m = re.search(r'^: "\$\{HC_DEPS:=([a-z-]+)\}"', f.read(), re.M)
    return m.group(1) if m else "system"


def install_deps_source_builds():
    """The source packages of tools/install-deps' hc_source_deps line."""
    with open(repo("tools", "install-deps"), encoding="utf-8") as f:
        m = re.search(r'^hc_source_deps="([^"]*)"', f.read(), re.M)
    return [e.split(":", 1)[0] for e in (m.group(1).split() if m else [])]


def install_deps_packages():
    """The Debian packages of tools/install-deps --build, for its default HC_DEPS."""
    env = {k: v for k, v in os.environ.items() if k != "HC_DEPS"}
    out = subprocess.run([repo("tools", "install-deps"), "--build", "--print-packages"],
                         capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    return out.split()


def run_tool(cmd, cwd=None, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).strip()


# ---------------------------------------------------------------------------------------------
# the checks


def check_yaml_parses(rep, docs):
    with rep.check("YAML: docker-compose.yml and every file under deploy/ parse"):
        paths = [repo("docker-compose.yml")]
        for d, _, files in os.walk(repo("deploy")):
            paths += [os.path.join(d, f) for f in sorted(files) if f.endswith((".yml", ".yaml"))]
        for p in sorted(paths):
            try:
                docs[p] = load_yaml_all(p)
                if not docs[p]:
                    rep.fail(p, "no YAML document")
            except (yaml.YAMLError, OSError) as e:
                rep.fail(p, f"does not parse: {e}")


def duration_s(v):
    """Seconds of a compose ("1m30s") or systemd ("60", "90s", "1min") duration."""
    if isinstance(v, (int, float)):
        return float(v)
    if re.fullmatch(r"\s*\d+(\.\d+)?\s*", str(v)):
        return float(v)
    v = re.sub(r"(\d)\s*min\b", r"\1m", str(v))
    total, n = 0.0, 0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(v)):
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}[unit]
        n += 1
    return total if n else None


def compose_hotcount_services(compose):
    out = {}
    for name, svc in (compose.get("services") or {}).items():
        image = str(svc.get("image", ""))
        build = svc.get("build")
        ctx = build.get("context") if isinstance(build, dict) else build
        if image.startswith("hotcount") or ctx in (".", "./"):
            out[name] = svc
    return out


def compose_config_file(svc, container_path):
    """The repository file bind-mounted at container_path (or in a mounted directory)."""
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            src, dst = v.get("source"), v.get("target")
        else:
            parts = str(v).split(":")
            if len(parts) < 2:
                continue
            src, dst = parts[0], parts[1]
        if not src or not (src.startswith("./") or src.startswith("/")):
            continue
        host = os.path.normpath(repo(src) if src.startswith("./") else src)
        if container_path == dst:
            return host
        if container_path.startswith(dst.rstrip("/") + "/"):
            return os.path.join(host, container_path[len(dst.rstrip("/")) + 1:])
    return None


def compose_invocations(rep, compose):
    invs = {}
    for name, svc in compose_hotcount_services(compose).items():
        cmd = svc.get("command")
        if isinstance(cmd, str):
            cmd = shlex.split(cmd)
        if not cmd:
            rep.fail("docker-compose.yml", f"service {name}: hotcount service without a command")
            continue
        verb, cfg, xs, _ = split_hotcount_args([str(c) for c in cmd])
        text = None
        if cfg:
            host = compose_config_file(svc, cfg)
            if not host or not os.path.isfile(host):
                rep.fail("docker-compose.yml", f"service {name}: -c {cfg} is not a bind-mounted file of "
                                               f"the repository")
                continue
            with open(host, encoding="utf-8") as f:
                text = f.read()
        invs[name] = Invocation(f"docker-compose.yml service {name}", verb, text, xs,
                                rel(host) if cfg else None)
    return invs


def check_compose(rep, docs, hotcount):
    path = repo("docker-compose.yml")
    compose = (docs.get(path) or [None])[0]
    if not isinstance(compose, dict):
        with rep.check("compose: structure"):
            rep.fail(path, "missing or not a mapping")
        return None, {}
    services = compose.get("services") or {}

    with rep.check("compose: services, dependencies, health checks, volumes"):
        required = {"kafka", "redis", "postgres", "hotcount-init", "stage1-a", "stage1-b", "stage2",
                    "produce", "prometheus", "grafana"}
        for s in sorted(required - set(services)):
            rep.fail(path, f"service {s!r} is missing")
        completed_deps = set()
        for name, svc in services.items():
            deps = svc.get("depends_on") or {}
            if isinstance(deps, list):
                deps = {d: {"condition": "service_started"} for d in deps}
            for dep, spec in deps.items():
                if dep not in services:
                    rep.fail(path, f"service {name}: depends_on {dep!r}, which is not a service")
                    continue
                cond = (spec or {}).get("condition", "service_started")
                if cond not in ("service_started", "service_healthy", "service_completed_successfully"):
                    rep.fail(path, f"service {name}: depends_on {dep}: unknown condition {cond!r}")
                hc = services[dep].get("healthcheck") or {}
                if cond == "service_healthy" and (not hc or hc.get("disable")):
                    rep.fail(path, f"service {name} waits for {dep} to be healthy, but {dep} has no "
                                   f"health check")
                if cond == "service_completed_successfully":
                    completed_deps.add(dep)
                    if str(services[dep].get("restart", "no")) not in ("no", "False", "false"):
                        rep.fail(path, f"service {dep} is waited for to complete but restarts "
                                       f"({services[dep].get('restart')})")
        for name, svc in services.items():
            hc = svc.get("healthcheck")
            if not hc:
                rep.fail(path, f"service {name}: no healthcheck")
            elif hc.get("disable"):
                if name not in completed_deps:
                    rep.fail(path, f"service {name}: health check disabled, but it is not a one-shot "
                                   f"that others wait for with service_completed_successfully")
            elif not hc.get("test"):
                rep.fail(path, f"service {name}: healthcheck without a test")
        declared = set((compose.get("volumes") or {}).keys())
        for name, svc in services.items():
            for v in svc.get("volumes") or []:
                src = v.get("source") if isinstance(v, dict) else str(v).split(":")[0]
                if not src:
                    continue
                if src.startswith("./"):
                    if not os.path.exists(repo(src)):
                        rep.fail(path, f"service {name}: bind mount source {src} does not exist")
                elif not src.startswith("/") and src not in declared:
                    rep.fail(path, f"service {name}: volume {src!r} is not declared under volumes:")

    invs = {}
    with rep.check("compose: hotcount services' configuration (hotcount --check-config)"):
        invs = compose_invocations(rep, compose)
        for s in ("hotcount-init", "stage1-a", "stage1-b", "stage2", "produce"):
            if s in services and s not in invs:
                rep.fail(path, f"service {s} does not run the hotcount image")
        for name, inv in invs.items():
            run_check_config(rep, hotcount, inv)

    with rep.check("compose: stages (instance ids, commands, metrics.listen, stop grace, load)"):
        expect_verbs = {"hotcount-init": "init", "stage1-a": "stage1", "stage1-b": "stage1",
                        "stage2": "stage2", "produce": "produce"}
        for s, verb in expect_verbs.items():
            if s in invs and invs[s].verb != verb:
                rep.fail(path, f"service {s} runs `hotcount {invs[s].verb}`, expected {verb}")
        ids = {}
        for name, inv in invs.items():
            if inv.verb not in STAGE_VERBS:
                continue
            eff = inv.effective()
            iid = eff.get("instance.id")
            if not iid:
                rep.fail(path, f"service {name}: no stable instance.id (-X instance.id=...)")
            else:
                key = (inv.verb, iid)
                if key in ids:
                    rep.fail(path, f"services {ids[key]} and {name} share {inv.verb} instance.id {iid}")
                ids[key] = name
            lst = eff.get("metrics.listen", "127.0.0.1:9464")
            if listen_host(lst) not in ("0.0.0.0", "[::]", "::", ""):
                rep.fail(path, f"service {name}: metrics.listen={lst}: Prometheus cannot reach a "
                               f"loopback address in another container; use 0.0.0.0:9464")
            grace = duration_s(services[name].get("stop_grace_period", "10s"))
            if grace is None or grace < 60:
                rep.fail(path, f"service {name}: stop_grace_period {services[name].get('stop_grace_period')!r}"
                               f" < 60s: a stop could kill the stage mid-commit")
            if str(services[name].get("stop_signal", "SIGTERM")) not in ("SIGTERM", "TERM", "15"):
                rep.fail(path, f"service {name}: stop_signal must be SIGTERM")
        if "produce" in invs:
            cmd = [str(c) for c in services["produce"].get("command") or []]
            if "--rate" not in cmd or cmd[cmd.index("--rate") + 1:cmd.index("--rate") + 2] != ["20000"]:
                rep.fail(path, "service produce: expected `--rate 20000`")

    with rep.check("compose: Kafka (KRaft), PostgreSQL, Redis settings match hotcount's"):
        kafka = services.get("kafka") or {}
        env = {k: str(v) for k, v in (kafka.get("environment") or {}).items()} \
            if isinstance(kafka.get("environment"), dict) else \
            dict(str(e).split("=", 1) for e in kafka.get("environment") or [] if "=" in str(e))
        image = str(kafka.get("image", ""))
        if not re.match(r"^apache/kafka:4\.\d+\.\d+$", image):
            rep.fail(path, f"kafka: image {image!r}: expected a pinned apache/kafka:4.x.y")
        roles = set(env.get("KAFKA_PROCESS_ROLES", "").replace(" ", "").split(","))
        if roles != {"broker", "controller"}:
            rep.fail(path, "kafka: KAFKA_PROCESS_ROLES must be broker,controller (one KRaft node)")
        voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
        if not voters.startswith(env.get("KAFKA_NODE_ID", "?") + "@"):
            rep.fail(path, "kafka: KAFKA_CONTROLLER_QUORUM_VOTERS must name KAFKA_NODE_ID")
        for k in ("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
                  "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"):
            if env.get(k) != "1":
                rep.fail(path, f"kafka: {k} must be 1 on a single broker (stage 1's transactions "
                               f"need the transaction state log)")
        advertised = {}
        for lst in env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
            m = re.match(r"^\s*\w+://([^:]+):(\d+)\s*$", lst)
            if m:
                advertised[m.group(1)] = int(m.group(2))
        for name, inv in invs.items():
            for b in inv.effective().get("brokers", "127.0.0.1:9092").split(","):
                host, _, port = b.strip().rpartition(":")
                if host not in services:
                    rep.fail(path, f"service {name}: brokers={b} is not a compose service")
                elif advertised.get(host) != int(port or 0):
                    rep.fail(path, f"service {name}: brokers={b} is not an advertised listener of "
                                   f"{host} ({env.get('KAFKA_ADVERTISED_LISTENERS')})")
            deps = services[name].get("depends_on") or {}
            store = inv.effective().get("store", "sqlite:hotcount.db")
            if inv.verb in ("stage2", "run", "init"):
                m = re.match(r"^(postgresql|postgres|redis)://(?:([^:@/]*)(?::[^@]*)?@)?([^:/?]+)(?::(\d+))?/?([^?]*)",
                             store)
                if not m:
                    rep.fail(path, f"service {name}: store={store}: expected postgresql:// or redis:// "
                                   f"(an SQLite file is private to one container)")
                    continue
                scheme, user, host, _, db = m.groups()
                if host not in services:
                    rep.fail(path, f"service {name}: store host {host} is not a compose service")
                    continue
                wait_on = {host} | ({"hotcount-init"} if name != "hotcount-init" else set())
                if not (set(deps) & wait_on):
                    rep.fail(path, f"service {name}: uses the store on {host} but depends on neither "
                                   f"{host} nor hotcount-init")
                if scheme.startswith("postgres"):
                    penv = services[host].get("environment") or {}
                    if user and str(penv.get("POSTGRES_USER")) != user:
                        rep.fail(path, f"service {name}: store user {user} != {host}'s POSTGRES_USER")
                    if db and str(penv.get("POSTGRES_DB")) != db:
                        rep.fail(path, f"service {name}: store database {db} != {host}'s POSTGRES_DB")
        pg = services.get("postgres") or {}
        if not str(pg.get("image", "")).startswith("postgres:15"):
            rep.fail(path, f"postgres: image {pg.get('image')!r}: expected postgres:15")
        redis_cmd = " ".join(str(c) for c in (services.get("redis") or {}).get("command") or [])
        for flag in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
            if flag not in redis_cmd:
                rep.fail(path, f"redis: command lacks `{flag}` (docs/STORES.md: AOF on, noeviction)")
    return compose, invs


def check_dockerfile(rep, hotcount):
    path = repo("Dockerfile")
    cache_dir = None  # where the build stage puts the source-built libraries
    system_only = set()  # Debian 12's packages of the libraries the image builds from source
    with rep.check("Dockerfile: stages, packages, user, port, health check, entry point"):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        # join continuation lines, drop comments
        lines, cur = [], ""
        for line in raw.splitlines():
            if not cur and line.lstrip().startswith("#"):
                continue
            if cur and line.lstrip().startswith("#"):
                continue
            if line.rstrip().endswith("\\"):
                cur += line.rstrip()[:-1] + " "
                continue
            cur += line
            if cur.strip():
                lines.append(cur.strip())
            cur = ""
        instrs = []
        for line in lines:
            op, _, arg = line.partition(" ")
            instrs.append((op.upper(), arg.strip()))
        stages = []
        for op, arg in instrs:
            if op == "FROM":
                m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", arg, re.I)
                stages.append({"image": m.group(1), "name": m.group(2), "instrs": []})
            elif stages:
                stages[-1]["instrs"].append((op, arg))
        if len(stages) < 2:
            rep.fail(path, "expected a multi-stage build (build + runtime)")
            return
        for st in stages:
            if not re.match(r"^debian:(12|bookworm)(-slim|-\d+.*)?$", st["image"]):
                rep.fail(path, f"FROM {st['image']}: expected debian:12 (bookworm)")

        def apt_packages(stage):
            pkgs = set()
            for op, arg in stage["instrs"]:
                if op != "RUN":
                    continue
                for seg in re.split(r"&&|;", arg):
                    toks = seg.split()
                    if "apt-get" in toks and "install" in toks:
                        pkgs |= {t for t in toks[toks.index("install") + 1:] if not t.startswith("-")}
            return pkgs

        build, runtime = stages[0], stages[-1]
        # The build stage installs what tools/install-deps --build would (for its default
        # HC_DEPS), so that install-deps, which it runs, installs nothing more.
        want_build = set(install_deps_packages())
        deps_mode = install_deps_default()
        want_runtime = {"libjansson4", "libsqlite3-0", "libpq5", "libjemalloc2", "ca-certificates"}
        built = install_deps_source_builds() if deps_mode == "debian-testing" else []
        system_only.update(SOURCE_BUILDS[b][0] for b in built if b in SOURCE_BUILDS)
        for name, (system_pkg, runtime_of_build) in SOURCE_BUILDS.items():
            # a source build brings the runtime packages it links, and is copied itself
            want_runtime |= runtime_of_build if name in built else {system_pkg}
        missing = want_build - apt_packages(build)
        if missing:
            rep.fail(path, f"build stage does not install {', '.join(sorted(missing))} "
                           f"(tools/install-deps --build --print-packages)")
        cache_dir = None
        if deps_mode == "debian-testing":
            envs = [a for o, a in build["instrs"] if o == "ENV" and a.startswith("HC_CACHE_DIR")]
            if envs:
                cache_dir = re.split(r"[= ]", envs[-1], maxsplit=1)[1].strip().rstrip("/")
            build_runs_all = " ".join(a for o, a in build["instrs"] if o == "RUN")
            if not cache_dir:
                rep.fail(path, "build stage sets no ENV HC_CACHE_DIR for the source-built libraries")
            if not re.search(r"(^|\s)tools/install-deps --build\b", build_runs_all):
                rep.fail(path, "build stage does not run tools/install-deps --build (HC_DEPS="
                               "debian-testing builds librdkafka, hiredis and libmicrohttpd there)")
            if cache_dir and not any(o == "COPY" and "--from=" in a and
                                     a.split()[-1].rstrip("/") == cache_dir for o, a in
                                     runtime["instrs"]):
                rep.fail(path, f"runtime stage does not COPY --from=<build> the source-built "
                               f"libraries into {cache_dir}")
        got_rt = apt_packages(runtime)
        if got_rt - want_runtime - {"curl"}:
            rep.fail(path, f"runtime stage installs more than the runtime libraries: "
                           f"{', '.join(sorted(got_rt - want_runtime))}")
        if want_runtime - got_rt:
            rep.fail(path, f"runtime stage lacks {', '.join(sorted(want_runtime - got_rt))}")
        build_runs = " ".join(a for o, a in build["instrs"] if o == "RUN")
        if not re.search(r"CMAKE_BUILD_TYPE=(Release|RelWithDebInfo)\b", build_runs):
            rep.fail(path, "build stage: cmake without CMAKE_BUILD_TYPE=Release or RelWithDebInfo")
        if re.search(r"\bctest\b|\btest_[a-z_]+\b|--target\s+(test|check)\b|\bmake\s+test\b", build_runs):
            rep.fail(path, "build stage runs tests; the image build must not (CI does)")
        rt = runtime["instrs"]
        users = [a for o, a in rt if o == "USER"]
        if not users or users[-1].split(":")[0] in ("0", "root"):
            rep.fail(path, "runtime stage must end as a non-root USER")
        elif not users[-1].split(":")[0].isdigit():
            rep.fail(path, f"USER {users[-1]}: use the numeric uid, so Kubernetes' runAsNonRoot can "
                           f"verify it")
        if not any(o == "EXPOSE" and "9464" in a.split() for o, a in rt):
            rep.fail(path, "runtime stage does not EXPOSE 9464")
        hcs = [a for o, a in rt if o == "HEALTHCHECK"]
        if not hcs or "/healthz" not in hcs[-1]:
            rep.fail(path, "runtime stage has no HEALTHCHECK on /healthz")
        eps = [a for o, a in rt if o == "ENTRYPOINT"]
        try:
            ep = json.loads(eps[-1]) if eps else None
        except ValueError:
            ep = None
        if ep != ["hotcount"]:
            rep.fail(path, 'ENTRYPOINT must be ["hotcount"] (exec form)')
        if not any(o == "COPY" and "--from=" in a and a.split()[-1] == "/usr/local/bin/hotcount" for o, a in rt):
            rep.fail(path, "runtime stage does not COPY --from=<build> ... /usr/local/bin/hotcount")
        # the health check script must be in the image, at a path the HEALTHCHECK can run
        if hcs and "hotcount-healthcheck" in hcs[-1] and not any(
                o == "COPY" and "hotcount-healthcheck" in a for o, a in rt):
            rep.fail(path, "HEALTHCHECK runs hotcount-healthcheck, which the runtime stage never copies")

        # The build context: every COPY source exists and survives .dockerignore, and so does
        # every source file CMakeLists.txt names.
        ignore = []
        di = repo(".dockerignore")
        if os.path.exists(di):
            with open(di, encoding="utf-8") as f:
                for line in f:
                    s = line.strip()
                    if s and not s.startswith("#"):
                        ignore.append(s)
        sources = []
        for st in stages:
            for o, a in st["instrs"]:
                if o in ("COPY", "ADD") and "--from=" not in a:
                    parts = [p for p in a.split() if not p.startswith("--")]
                    sources += parts[:-1]
        for s in sources:
            s = s.rstrip("/")
            if not os.path.exists(repo(s)):
                rep.fail(path, f"COPY {s}: no such file in the repository")
            elif dockerignored(s, ignore):
                rep.fail(".dockerignore", f"excludes {s}, which the Dockerfile copies")
        with open(repo("CMakeLists.txt"), encoding="utf-8") as f:
            cm = f.read()
        copied = [s.rstrip("/") for s in sources]
        # every C source or header CMakeLists.txt names (even inside a disabled option: the
        # check stays simple, and copying one more folder costs nothing), and every
        # add_subdirectory()
        # (a path that is no file of the tree, such as an #include name in a comment, is none)
        named = {n for n in re.findall(r"((?:[\w.-]+/)+[\w.-]+\.[ch])\b", cm)
                 if os.path.isfile(repo(n))}
        named |= set(re.findall(r"add_subdirectory\(\s*([\w./-]+)", cm))
        for src in sorted(named):
            if not any(src == c or src.startswith(c + "/") for c in copied):
                rep.fail(path, f"CMakeLists.txt builds {src}, which no COPY brings into the build stage")
            elif dockerignored(src, ignore):
                rep.fail(".dockerignore", f"excludes {src}, which CMakeLists.txt needs")
        for s in os.listdir(repo("src")):
            if s.endswith(".c") and dockerignored("src/" + s, ignore):
                rep.fail(".dockerignore", f"excludes src/{s}")

    # The shared libraries the binary links against come from the runtime stage's packages.
    if not which("dpkg-query") or not which("ldd") or not (which("readelf") or which("objdump")):
        rep.skip("Dockerfile: runtime packages cover the binary's shared libraries",
                 "dpkg-query, ldd or readelf/objdump not found (not a Debian machine)")
        return
    with rep.check("Dockerfile: runtime packages provide every library HOTCOUNT links"):
        if which("readelf"):
            _, out = run_tool(["readelf", "-d", hotcount])
            needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
        else:
            _, out = run_tool(["objdump", "-p", hotcount])
            needed = re.findall(r"NEEDED\s+(\S+)", out)
        if not needed:
            rep.fail(hotcount, "found no NEEDED libraries (not a dynamic executable?)")
        _, ldd = run_tool(["ldd", hotcount])
        paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
        base = {"libc6", "libgcc-s1"}  # in every debian image
        # A sanitizer build (tools/test's second pass) links the sanitizer runtimes; the image is
        # never built with them.
        sanitizer = [lib for lib in needed if re.match(r"lib(a|ub|t|l|hwa)san\.so", lib)]
        if sanitizer:
            print(f"     note: ignoring the sanitizer runtimes {', '.join(sanitizer)} "
                  f"(a sanitizer build; the image has none)", flush=True)
        cache = os.path.realpath(os.environ.get("HC_CACHE_DIR") or
                                 os.path.expanduser("~/.cache/hotcount"))
        todo = [(hotcount, lib, paths.get(lib)) for lib in needed if lib not in sanitizer]
        seen = set()
        while todo:
            who, lib, p = todo.pop(0)
            if lib in seen:
                continue
            seen.add(lib)
            if not p and lib.startswith("ld-linux"):
                continue  # the dynamic loader, of libc6
            if not p:
                rep.fail(who, f"{lib}: not found by ldd")
                continue
            if os.path.realpath(p).startswith(cache + os.sep):
                # A library tools/install-deps built from Debian testing's source: the image
                # must build and copy it too, and its own libraries must be in the runtime stage.
                if cache_dir is None:
                    rep.fail("Dockerfile", f"the binary links {lib} from {p}, a source build of "
                                           f"tools/install-deps, which the image does not make")
                _, out = run_tool(["readelf", "-d", p]) if which("readelf") else (0, "")
                _, sub_ldd = run_tool(["ldd", p])
                sub_paths = dict(re.findall(r"^\s*(\S+) => (\S+)", sub_ldd, re.M))
                todo += [(p, n, sub_paths.get(n)) for n in
                         re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)]
                continue
            pkg = None
            for candidate in (p, os.path.realpath(p)):
                rc, out = run_tool(["dpkg-query", "-S", candidate])
                if rc == 0:
                    pkg = out.splitlines()[0].split(":")[0]
                    break
            if pkg is None:
                rep.fail(who, f"{lib} ({p}) belongs to no Debian package")
            elif pkg in system_only and cache_dir is not None:
                # A build directory configured with HC_DEPS=system (or before the switch): it
                # links Debian 12's library where the image links the source build.
                print(f"     note: {rel(who)} links {lib} from {pkg} (HC_DEPS=system); the image "
                      f"builds it from Debian testing's source", flush=True)
            elif pkg not in base and pkg not in got_rt:
                rep.fail("Dockerfile", f"{'the binary' if who == hotcount else rel(who)} links "
                                       f"{lib} from package {pkg}, which the runtime stage does "
                                       f"not install")


def dockerignored(path, patterns):
    """Docker's .dockerignore rules, enough for our allow-list: the last matching pattern wins,
    `!` re-includes, a pattern matching a parent directory matches everything below it."""

    def match(pat, p):
        pat = pat.strip("/")
        rx = ""
        i = 0
        while i < len(pat):
            if pat.startswith("**", i):
                rx += ".*"
                i += 2
                if pat.startswith("/", i):
                    rx = rx[:-2] + "(?:.*/)?"
                    i += 1
            elif pat[i] == "*":
                rx += "[^/]*"
                i += 1
            elif pat[i] == "?":
                rx += "[^/]"
                i += 1
            else:
                rx += re.escape(pat[i])
                i += 1
        parts = p.split("/")
        return any(re.fullmatch(rx, "/".join(parts[:n])) for n in range(1, len(parts) + 1))

    excluded = False
    for pat in patterns:
        neg = pat.startswith("!")
        if match(pat[1:] if neg else pat, path):
            excluded = not neg
    return excluded


RUNBOOK_URL = re.compile(r"(?:^|/)docs/RUNBOOK\.md#([A-Za-z0-9_-]+)$")


def runbook_entries(path):
    """docs/RUNBOOK.md's anchors: {anchor: the heading of the entry it opens}."""
    entries, pending = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            pending += re.findall(r'<a id="([^"]+)"></a>', line)
            if line.startswith("## "):
                for a in pending:
                    entries[a] = line[3:].strip()
                pending = []
    for a in pending:  # an anchor after the last heading opens no entry
        entries[a] = ""
    return entries


def check_runbook_urls(rep, alerts_path, rules):
    runbook_path = repo("docs", "RUNBOOK.md")
    if not os.path.exists(runbook_path):
        rep.fail(runbook_path, "missing (the alerts' runbook_url point into it)")
        return
    entries = runbook_entries(runbook_path)
    for g in rules.get("groups") or []:
        for r in g.get("rules") or []:
            if "alert" not in r:
                continue
            where = f"{rel(alerts_path)} {r['alert']}"
            url = str((r.get("annotations") or {}).get("runbook_url", "")).strip()
            m = RUNBOOK_URL.search(url)
            if not m:
                rep.fail(None, f"{where}: runbook_url {url!r} is not .../docs/RUNBOOK.md#ANCHOR")
            elif m.group(1) not in entries:
                rep.fail(None, f"{where}: docs/RUNBOOK.md has no anchor {m.group(1)!r}")
            elif r["alert"] not in entries[m.group(1)]:
                rep.fail(None, f"{where}: docs/RUNBOOK.md#{m.group(1)} opens the entry "
                               f"{entries[m.group(1)]!r}, which does not name the alert")


def check_prometheus(rep, docs, compose, invs, metrics, strict):
    prom_path = repo("deploy", "prometheus", "prometheus.yml")
    alerts_path = repo("deploy", "prometheus", "alerts.yml")
    tests_path = repo("deploy", "prometheus", "alerts_test.yml")
    recorded = set()

    with rep.check("alerts.yml: structure, annotations, metric names and labels"):
        rules = (docs.get(alerts_path) or [None])[0]
        if not isinstance(rules, dict) or not rules.get("groups"):
            rep.fail(alerts_path, "no rule groups")
            rules = {"groups": []}
        names = set()
        for g in rules["groups"]:
            for r in g.get("rules") or []:
                if "record" in r:
                    recorded.add(r["record"])
        for g in rules["groups"]:
            for r in g.get("rules") or []:
                where = f"{rel(alerts_path)} {r.get('alert') or r.get('record')}"
                if "alert" in r:
                    if r["alert"] in names:
                        rep.fail(alerts_path, f"alert {r['alert']} defined twice")
                    names.add(r["alert"])
                    ann = r.get("annotations") or {}
                    for k in ("summary", "description", "runbook"):
                        if not str(ann.get(k, "")).strip():
                            rep.fail(None, f"{where}: annotation {k!r} missing")
                    if not (r.get("labels") or {}).get("severity"):
                        rep.fail(None, f"{where}: no severity label")
                check_expr_metrics(rep, where, str(r.get("expr", "")), metrics, recorded)
        # the alerts the deployment promises
        want = {
            "lag growing": lambda e: "hotcount_consumer_lag" in e or "hotcount:consumer_lag" in e,
            "no flush": lambda e: "hotcount_transactions_total" in e and "== 0" in e,
            "no store batch": lambda e: "hotcount_store_batches_total" in e and "== 0" in e,
            "DLQ rate": lambda e: 'result="invalid"' in e,
            "transaction aborts": lambda e: 'outcome="abort"' in e,
            "store conflicts": lambda e: 'outcome="conflict"' in e,
            "store errors": lambda e: 'outcome="error"' in e,
            "hot key": lambda e: "hotcount_hot_key_events_per_second" in e,
            "stage down": lambda e: re.search(r"\bup\b", e) is not None,
            "stage absent": lambda e: "absent(" in e,
            "not ready": lambda e: "hotcount_ready" in e,
        }
        exprs = [str(r.get("expr", "")) for g in rules["groups"] for r in g.get("rules") or []
                 if "alert" in r]
        for what, pred in want.items():
            if not any(pred(e) for e in exprs):
                rep.fail(alerts_path, f"no alert for {what}")

    with rep.check("alerts.yml: each alert's runbook_url opens its entry in docs/RUNBOOK.md"):
        check_runbook_urls(rep, alerts_path, rules)

    with rep.check("prometheus.yml: rule files, scrape targets match the compose stages"):
        prom = (docs.get(prom_path) or [None])[0] or {}
        for rf in prom.get("rule_files") or []:
            if not os.path.exists(os.path.join(os.path.dirname(prom_path), rf)):
                rep.fail(prom_path, f"rule file {rf} does not exist next to prometheus.yml")
        jobs = {j.get("job_name"): j for j in prom.get("scrape_configs") or []}
        job = jobs.get("hotcount")
        if not job:
            rep.fail(prom_path, "no scrape job named hotcount (the alerts select job=\"hotcount\")")
        elif compose:
            services = compose.get("services") or {}
            targets = {}
            for sc in job.get("static_configs") or []:
                for t in sc.get("targets") or []:
                    targets[t] = (sc.get("labels") or {}).get("role")
            stage_svcs = {n: i for n, i in invs.items() if i.verb in STAGE_VERBS}
            for t, role in targets.items():
                host, _, port = t.rpartition(":")
                if host not in services:
                    rep.fail(prom_path, f"target {t}: {host} is not a compose service")
                    continue
                inv = stage_svcs.get(host)
                if not inv:
                    rep.fail(prom_path, f"target {t}: {host} runs no hotcount stage")
                    continue
                lport = listen_port(inv.effective().get("metrics.listen", "127.0.0.1:9464"))
                if str(lport) != port:
                    rep.fail(prom_path, f"target {t}: {host} serves metrics on port {lport}")
                if inv.verb in ("stage1", "stage2") and role != inv.verb:
                    rep.fail(prom_path, f"target {t}: role {role!r}, but {host} runs {inv.verb}")
            for name in stage_svcs:
                if not any(t.rpartition(":")[0] == name for t in targets):
                    rep.fail(prom_path, f"compose stage {name} is not scraped")

    if not which("promtool"):
        msg = "promtool not found: the PromQL of alerts.yml and the dashboard is NOT checked " \
              "(install it: apt-get install prometheus)"
        if strict:
            with rep.check("promtool"):
                rep.fail(None, msg + "; --strict makes this a failure")
        else:
            rep.skip("promtool check rules / check config / test rules", msg)
        return recorded
    with rep.check("promtool check rules deploy/prometheus/alerts.yml"):
        rc, out = run_tool(["promtool", "check", "rules", alerts_path])
        if rc != 0:
            rep.fail(alerts_path, out)
    with rep.check("promtool check config deploy/prometheus/prometheus.yml"):
        rc, out = run_tool(["promtool", "check", "config", prom_path])
        if rc != 0:
            rep.fail(prom_path, out)
    with rep.check("promtool test rules deploy/prometheus/alerts_test.yml (annotations stripped)"):
        if not os.path.exists(tests_path):
            rep.fail(tests_path, "missing")
        else:
            with tempfile.TemporaryDirectory(prefix="hc-deploy-") as tmp:
                stripped = load_yaml(alerts_path)
                for g in stripped.get("groups") or []:
                    for r in g.get("rules") or []:
                        r.pop("annotations", None)
                with open(os.path.join(tmp, "alerts.yml"), "w", encoding="utf-8") as f:
                    yaml.safe_dump(stripped, f, sort_keys=False)
                shutil.copy(tests_path, tmp)
                rc, out = run_tool(["promtool", "test", "rules", os.path.join(tmp, "alerts_test.yml")])
                if rc != 0:
                    rep.fail(tests_path, out.replace(tmp + "/", ""))
                # every alert is exercised by at least one test that expects it to fire
                tests = load_yaml(tests_path)
                fired = {a.get("alertname") for t in tests.get("tests") or []
                         for a in t.get("alert_rule_test") or [] if a.get("exp_alerts")}
                for g in stripped.get("groups") or []:
                    for r in g.get("rules") or []:
                        if "alert" in r and r["alert"] not in fired:
                            rep.fail(tests_path, f"no test expects {r['alert']} to fire")
    return recorded


def grafana_exprs(dash):
    """(panel title, expression) for every query of the dashboard, rows' panels included."""
    out = []

    def walk(panels):
        for p in panels or []:
            for t in p.get("targets") or []:
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"], p))
            walk(p.get("panels"))

    walk(dash.get("panels"))
    return out


def grafana_to_promql(expr):
    """Grafana's variables replaced by values PromQL accepts, for promtool."""
    e = expr.replace("$__rate_interval", "1m").replace("${__rate_interval}", "1m")
    e = e.replace("$__interval", "1m").replace("${__interval}", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{[^}]*\}|\$[A-Za-z_]\w*", ".*", e)


def check_grafana(rep, docs, compose, metrics, recorded, strict):
    dash_path = repo("deploy", "grafana", "dashboards", "hotcount.json")
    ds_path = repo("deploy", "grafana", "provisioning", "datasources", "prometheus.yml")
    prov_path = repo("deploy", "grafana", "provisioning", "dashboards", "hotcount.yml")
    dash = None
    with rep.check("Grafana dashboard: JSON, panels, metric names and labels"):
        with open(dash_path, encoding="utf-8") as f:
            dash = json.load(f)
        if not dash.get("uid") or not dash.get("title"):
            rep.fail(dash_path, "dashboard needs a uid and a title")
        ids = []

        def walk(panels):
            for p in panels or []:
                ids.append(p.get("id"))
                if p.get("type") != "row":
                    if "gridPos" not in p:
                        rep.fail(dash_path, f"panel {p.get('title')!r}: no gridPos")
                    refs = [t.get("refId") for t in p.get("targets") or []]
                    if len(refs) != len(set(refs)):
                        rep.fail(dash_path, f"panel {p.get('title')!r}: duplicate refIds")
                    if not p.get("targets"):
                        rep.fail(dash_path, f"panel {p.get('title')!r}: no queries")
                walk(p.get("panels"))

        walk(dash.get("panels"))
        if len(ids) != len(set(ids)) or None in ids:
            rep.fail(dash_path, "panel ids must be present and unique")
        exprs = grafana_exprs(dash)
        for title, e, _ in exprs:
            check_expr_metrics(rep, f"{rel(dash_path)} panel {title!r}", e, metrics, recorded,
                               allow_up=True)
        for v in (dash.get("templating") or {}).get("list") or []:
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.match(r"^\s*label_values\((.*),\s*(\w+)\s*\)\s*$", str(q or ""))
            if m:
                check_expr_metrics(rep, f"{rel(dash_path)} variable {v.get('name')}", m.group(1),
                                   metrics, recorded)
        # the panels the deployment promises, recognised by what they query
        want = {
            "events in/s (ok, invalid)": lambda e, p: "hotcount_events_total" in e and "result" in e,
            "events per store write": lambda e, p: "hotcount_events_stored_total" in e and "/" in e,
            "store batches by outcome": lambda e, p: "hotcount_store_batches_total" in e and "outcome" in e,
            "transactions by outcome": lambda e, p: "hotcount_transactions_total" in e and "outcome" in e,
            "consumer lag per partition": lambda e, p: "hotcount_consumer_lag" in e and "partition" in e,
            "end-to-end latency quantiles": lambda e, p: "histogram_quantile" in e
                                                            and "hotcount_end_to_end_seconds_bucket" in e,
            "flush duration": lambda e, p: "hotcount_flush_seconds_bucket" in e,
            "hot keys table": lambda e, p: "hotcount_hot_key_events_per_second" in e and p.get("type") == "table",
            "assigned partitions": lambda e, p: "hotcount_assigned_partitions" in e,
        }
        for what, pred in want.items():
            if not any(pred(e, p) for _, e, p in exprs):
                rep.fail(dash_path, f"no panel for {what}")

    with rep.check("Grafana provisioning: datasource uid, dashboard path, compose mounts"):
        ds = (docs.get(ds_path) or [{}])[0] or {}
        uids = {d.get("uid") for d in ds.get("datasources") or []}
        dsvar = next((v for v in (dash or {}).get("templating", {}).get("list", [])
                      if v.get("type") == "datasource"), None)
        default_uid = ((dsvar or {}).get("current") or {}).get("value")
        if dsvar and default_uid not in uids:
            rep.fail(dash_path, f"datasource variable defaults to uid {default_uid!r}; provisioned: "
                                f"{sorted(u for u in uids if u)}")
        if compose:
            services = compose.get("services") or {}
            for d in ds.get("datasources") or []:
                m = re.match(r"^https?://([^:/]+):(\d+)", str(d.get("url", "")))
                if not m or m.group(1) not in services:
                    rep.fail(ds_path, f"datasource url {d.get('url')} is not a compose service")
            graf = services.get("grafana") or {}
            prov = (docs.get(prov_path) or [{}])[0] or {}
            want_path = None
            for p in prov.get("providers") or []:
                want_path = (p.get("options") or {}).get("path")
            if compose_config_file(graf, (want_path or "").rstrip("/") + "/hotcount.json") != dash_path:
                rep.fail(prov_path, f"provider path {want_path} is not where docker-compose.yml mounts "
                                    f"deploy/grafana/dashboards")
            if compose_config_file(graf, "/etc/grafana/provisioning/datasources/prometheus.yml") != ds_path:
                rep.fail("docker-compose.yml", "grafana does not mount deploy/grafana/provisioning at "
                                               "/etc/grafana/provisioning")

    if dash is None:
        return
    if not which("promtool"):
        if strict:
            with rep.check("promtool (dashboard queries)"):
                rep.fail(None, "promtool not found; --strict makes this a failure")
        else:
            rep.skip("promtool check of the dashboard's queries", "promtool not found "
                     "(apt-get install prometheus)")
        return
    with rep.check("promtool: the dashboard's queries are valid PromQL"):
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:query:{i}", "expr": grafana_to_promql(e)}
            for i, (_, e, _) in enumerate(grafana_exprs(dash))]}]}
        with tempfile.TemporaryDirectory(prefix="hc-deploy-") as tmp:
            p = os.path.join(tmp, "dashboard-rules.yml")
            with open(p, "w", encoding="utf-8") as f:
                yaml.safe_dump(rules, f, sort_keys=False)
            rc, out = run_tool(["promtool", "check", "rules", p])
            if rc != 0:
                # name the panel: the output cites the rule index
                titles = [t for t, _, _ in grafana_exprs(dash)]
                for m in re.finditer(r"dashboard:query:(\d+)", out):
                    out += f"\n(dashboard:query:{m.group(1)} is panel {titles[int(m.group(1))]!r})"
                rep.fail(dash_path, out)


def k8s_objects(docs):
    objs = []
    for path, ds in docs.items():
        if os.sep + os.path.join("deploy", "k8s") + os.sep in path:
            for d in ds:
                objs.append((path, d))
    return objs


def labels_match(selector, labels):
    ml = (selector or {}).get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for e in (selector or {}).get("matchExpressions") or []:
        v = labels.get(e.get("key"))
        op = e.get("operator")
        vals = e.get("values") or []
        if (op == "In" and v not in vals) or (op == "NotIn" and v in vals) or \
                (op == "Exists" and v is None) or (op == "DoesNotExist" and v is not None):
            return False
    return bool(ml or (selector or {}).get("matchExpressions"))


def expand_k8s(value, env, pod_name):
    def sub(m):
        var = m.group(1)
        e = env.get(var)
        if e is None:
            return m.group(0)
        if "value" in e:
            return str(e["value"])
        ref = (e.get("valueFrom") or {}).get("fieldRef") or {}
        if ref.get("fieldPath") == "metadata.name":
            return pod_name
        return m.group(0)

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def check_k8s(rep, docs, hotcount):
    objs = k8s_objects(docs)
    by_kind = {}
    for path, o in objs:
        by_kind.setdefault(o.get("kind"), []).append((path, o))

    with rep.check("k8s: objects, selectors, services, probes, grace periods, budgets"):
        for path, o in objs:
            if not o.get("apiVersion") or not o.get("kind") or not (o.get("metadata") or {}).get("name"):
                rep.fail(path, "object without apiVersion, kind or metadata.name")
        cms = {o["metadata"]["name"]: o for _, o in by_kind.get("ConfigMap", [])}
        svcs = {o["metadata"]["name"]: o for _, o in by_kind.get("Service", [])}
        sts = {o["metadata"]["name"]: (p, o) for p, o in by_kind.get("StatefulSet", [])}
        want = {"hotcount-stage1": ("stage1", 2), "hotcount-stage2": ("stage2", 1)}
        for name, (verb, replicas) in want.items():
            if name not in sts:
                rep.fail("deploy/k8s", f"no StatefulSet {name}")
                continue
            path, o = sts[name]
            spec = o.get("spec") or {}
            where = f"{rel(path)} StatefulSet {name}"
            if spec.get("replicas") != replicas:
                rep.fail(None, f"{where}: replicas {spec.get('replicas')}, expected {replicas}")
            tmpl = spec.get("template") or {}
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            if not labels_match(spec.get("selector"), labels):
                rep.fail(None, f"{where}: selector does not match the pod template's labels")
            svc = svcs.get(spec.get("serviceName"))
            if not svc:
                rep.fail(None, f"{where}: serviceName {spec.get('serviceName')!r} is not a Service here")
            else:
                if (svc.get("spec") or {}).get("clusterIP") != "None":
                    rep.fail(None, f"{where}: its Service {svc['metadata']['name']} is not headless")
                if not labels_match({"matchLabels": (svc.get("spec") or {}).get("selector")}, labels):
                    rep.fail(None, f"{where}: Service {svc['metadata']['name']} does not select its pods")
            pod = tmpl.get("spec") or {}
            if (pod.get("terminationGracePeriodSeconds") or 30) < 60:
                rep.fail(None, f"{where}: terminationGracePeriodSeconds < 60: a stop could kill a commit")
            ann = (tmpl.get("metadata") or {}).get("annotations") or {}
            if ann.get("prometheus.io/scrape") != "true" or not ann.get("prometheus.io/port"):
                rep.fail(None, f"{where}: prometheus.io/scrape and prometheus.io/port annotations missing")
            sec = pod.get("securityContext") or {}
            if not sec.get("runAsNonRoot"):
                rep.fail(None, f"{where}: securityContext.runAsNonRoot is not set")
            conts = pod.get("containers") or []
            if len(conts) != 1:
                rep.fail(None, f"{where}: expected one container")
                continue
            c = conts[0]
            args = [str(a) for a in c.get("args") or []]
            if not args or args[0] != verb:
                rep.fail(None, f"{where}: args must start with {verb}")
            if "instance.id=$(POD_NAME)" not in args:
                rep.fail(None, f"{where}: args lack -X instance.id=$(POD_NAME)")
            env = {e.get("name"): e for e in c.get("env") or []}
            if ((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") \
                    != "metadata.name":
                rep.fail(None, f"{where}: env POD_NAME must come from fieldRef metadata.name")
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            if ports.get("metrics") != 9464:
                rep.fail(None, f"{where}: container port 'metrics' must be 9464")
            if str(ann.get("prometheus.io/port")) != str(ports.get("metrics")):
                rep.fail(None, f"{where}: prometheus.io/port does not match the metrics port")
            for probe, path_want in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                hg = (c.get(probe) or {}).get("httpGet") or {}
                if hg.get("path") != path_want:
                    rep.fail(None, f"{where}: {probe} must GET {path_want}")
                if hg.get("port") not in (ports.get("metrics"), "metrics"):
                    rep.fail(None, f"{where}: {probe} port {hg.get('port')!r} is not the metrics port")
            res = c.get("resources") or {}
            for k in ("requests", "limits"):
                if not (res.get(k) or {}).get("memory") or not (res.get(k) or {}).get("cpu"):
                    rep.fail(None, f"{where}: resources.{k} needs cpu and memory")
            mounts = {m.get("name"): m.get("mountPath") for m in c.get("volumeMounts") or []}
            for v in pod.get("volumes") or []:
                cmn = (v.get("configMap") or {}).get("name")
                if cmn and cmn not in cms:
                    rep.fail(None, f"{where}: volume {v.get('name')} uses ConfigMap {cmn}, not defined here")
                if cmn and v.get("name") not in mounts:
                    rep.fail(None, f"{where}: volume {v.get('name')} is not mounted")
            pdbs = [o2 for _, o2 in by_kind.get("PodDisruptionBudget", [])
                    if labels_match((o2.get("spec") or {}).get("selector"), labels)]
            if not pdbs:
                rep.fail(None, f"{where}: no PodDisruptionBudget selects its pods")
            for pdb in pdbs:
                ps = pdb.get("spec") or {}
                if ps.get("minAvailable") is not None and str(ps.get("minAvailable")) == str(replicas):
                    rep.fail(None, f"{where}: PodDisruptionBudget {pdb['metadata']['name']} minAvailable="
                                   f"{replicas} blocks every voluntary eviction")
        jobs = [o for _, o in by_kind.get("Job", [])]
        init = [j for j in jobs if [str(a) for a in (((j.get("spec") or {}).get("template") or {})
                                                        .get("spec") or {}).get("containers", [{}])[0]
                                   .get("args", [])][:1] == ["init"]]
        if not init:
            rep.fail("deploy/k8s", "no Job runs `hotcount init`")
        for j in init:
            rp = ((j.get("spec") or {}).get("template") or {}).get("spec", {}).get("restartPolicy")
            if rp not in ("OnFailure", "Never"):
                rep.fail("deploy/k8s", f"Job {j['metadata']['name']}: restartPolicy must be OnFailure or Never")
        pms = by_kind.get("PodMonitor", [])
        if not pms:
            rep.fail("deploy/k8s", "no PodMonitor")
        for path, pm in pms:
            if pm.get("apiVersion") != "monitoring.coreos.com/v1":
                rep.fail(path, "PodMonitor apiVersion must be monitoring.coreos.com/v1")
            if any(os.path.dirname(path) == os.path.dirname(p) for p, _ in
                   by_kind.get("StatefulSet", [])):
                rep.fail(path, "keep the PodMonitor apart from the other manifests (it needs the "
                               "operator's CRDs)")
            spec = pm.get("spec") or {}
            for name, (_, o) in sts.items():
                labels = ((o.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
                if not labels_match(spec.get("selector"), labels):
                    rep.fail(path, f"PodMonitor does not select {name}'s pods")
            for ep in spec.get("podMetricsEndpoints") or []:
                if ep.get("port") != "metrics":
                    rep.fail(path, "podMetricsEndpoints port must be the pods' 'metrics' port")
                if not any(r.get("targetLabel") == "role" for r in ep.get("relabelings") or []):
                    rep.fail(path, "no relabeling to the role label the alerts and dashboard use")
            if spec.get("jobLabel") and not all(
                    ((o.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
                    .get(spec["jobLabel"]) == "hotcount" for _, o in sts.values()):
                rep.fail(path, f"jobLabel {spec['jobLabel']} does not give job=\"hotcount\"")

    with rep.check("k8s: every hotcount container's configuration (hotcount --check-config)"):
        cms = {o["metadata"]["name"]: o for _, o in by_kind.get("ConfigMap", [])}
        n = 0
        for path, o in objs:
            kind = o.get("kind")
            if kind not in ("StatefulSet", "Job", "Deployment"):
                continue
            pod = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
            pod_name = f"{o['metadata']['name']}-0"
            vols = {v.get("name"): v for v in pod.get("volumes") or []}
            for c in pod.get("containers") or []:
                args = [str(a) for a in c.get("args") or []]
                env = {e.get("name"): e for e in c.get("env") or []}
                args = [expand_k8s(a, env, pod_name) for a in args]
                verb, cfg, xs, _ = split_hotcount_args(args)
                where = f"{rel(path)} {kind} {o['metadata']['name']}"
                for kv in xs:
                    if "$(" in kv:
                        rep.fail(None, f"{where}: -X {kv}: variable not defined in the container's env")
                text, label = None, None
                if cfg:
                    for m in c.get("volumeMounts") or []:
                        mp = m.get("mountPath", "").rstrip("/")
                        if cfg.startswith(mp + "/"):
                            key = cfg[len(mp) + 1:]
                            cm_name = (vols.get(m.get("name"), {}).get("configMap") or {}).get("name")
                            data = (cms.get(cm_name) or {}).get("data") or {}
                            if key in data:
                                text, label = data[key], f"<ConfigMap {cm_name} key {key}>"
                    if text is None:
                        rep.fail(None, f"{where}: -c {cfg} is not a key of a mounted ConfigMap")
                        continue
                n += 1
                run_check_config(rep, hotcount, Invocation(where, verb, text, xs, label))
                eff = Invocation(where, verb, text, xs, label).effective()
                if verb in ("stage1", "stage2", "run") and \
                        listen_host(eff.get("metrics.listen", "127.0.0.1:9464")) not in ("0.0.0.0", "[::]"):
                    rep.fail(None, f"{where}: metrics.listen must listen on 0.0.0.0 for probes and "
                                   f"Prometheus")
        if n == 0:
            rep.fail("deploy/k8s", "found no hotcount container to check")


def parse_unit(path):
    """{section: [(key, value)]}; systemd allows repeated keys, so no dict per section."""
    sections, cur = {}, None
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        m = re.match(r"^\[(.+)\]$", s)
        if m:
            cur = sections.setdefault(m.group(1), [])
            continue
        if cur is None or "=" not in s:
            raise ValueError(f"cannot parse line {s!r}")
        k, v = s.split("=", 1)
        cur.append((k.strip(), v.strip()))
    return sections


def unit_get(sec, key, default=None):
    vals = [v for k, v in sec if k == key]
    return vals[-1] if vals else default


def check_systemd(rep, hotcount, strict):
    d = repo("deploy", "systemd")
    units = {"hotcount-stage1@.service": "stage1", "hotcount-stage2@.service": "stage2",
             "hotcount-init.service": "init"}
    props_path = os.path.join(d, "hotcount.properties")
    with rep.check("systemd: units' settings and configuration (hotcount --check-config)"):
        with open(props_path, encoding="utf-8") as f:
            props_text = f.read()
        for fname, verb in units.items():
            path = os.path.join(d, fname)
            if not os.path.exists(path):
                rep.fail(path, "missing")
                continue
            u = parse_unit(path)
            svc = u.get("Service")
            if svc is None or "Unit" not in u or "Install" not in u:
                rep.fail(path, "needs [Unit], [Service] and [Install] sections")
                continue
            execs = [v for k, v in svc if k == "ExecStart"]
            if len(execs) != 1:
                rep.fail(path, "expected one ExecStart=")
                continue
            argv = shlex.split(execs[0].lstrip("-@:+!"))
            if not argv[0].endswith("/hotcount"):
                rep.fail(path, f"ExecStart runs {argv[0]}, not hotcount")
            env = {}
            for k, v in svc:
                if k == "Environment":
                    for kv in shlex.split(v):
                        ek, _, ev = kv.partition("=")
                        env[ek] = ev
            instance = "s1-a" if verb == "stage1" else "s2-a"
            args = [re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)),
                           a.replace("%i", instance)) for a in argv[1:]]
            v, cfg, xs, _ = split_hotcount_args(args)
            if v != verb:
                rep.fail(path, f"runs `hotcount {v}`, expected {verb}")
            for kv in xs:
                if "$" in kv:
                    rep.fail(path, f"-X {kv}: variable without an Environment= default")
            if cfg != "/etc/hotcount/hotcount.properties":
                rep.fail(path, "expected -c /etc/hotcount/hotcount.properties (the example file "
                               "deploy/systemd/hotcount.properties)")
            if verb in ("stage1", "stage2"):
                if f"instance.id={instance}" not in xs:
                    rep.fail(path, "expected -X instance.id=%i")
                if unit_get(svc, "Restart") != "on-failure":
                    rep.fail(path, "Restart=on-failure expected")
                if not unit_get(svc, "RestartSec"):
                    rep.fail(path, "RestartSec= expected")
                if unit_get(svc, "KillSignal", "SIGTERM") != "SIGTERM":
                    rep.fail(path, "KillSignal=SIGTERM expected")
                if (duration_s(unit_get(svc, "TimeoutStopSec", "90s")) or 0) < 60:
                    rep.fail(path, "TimeoutStopSec >= 60 expected (a clean stop commits the window)")
            else:
                if unit_get(svc, "Type") != "oneshot":
                    rep.fail(path, "Type=oneshot expected")
            if unit_get(svc, "NoNewPrivileges") != "yes":
                rep.fail(path, "NoNewPrivileges=yes expected")
            if unit_get(svc, "ProtectSystem") != "strict":
                rep.fail(path, "ProtectSystem=strict expected")
            if unit_get(svc, "DynamicUser") != "yes" and unit_get(svc, "User") in (None, "root", "0"):
                rep.fail(path, "runs as root: set DynamicUser=yes or User=")
            run_check_config(rep, hotcount, Invocation(rel(path), v, props_text, xs, rel(props_path)))

    if not which("systemd-analyze"):
        if strict:
            with rep.check("systemd-analyze verify"):
                rep.fail(None, "systemd-analyze not found; --strict makes this a failure")
        else:
            rep.skip("systemd-analyze verify", "systemd-analyze not found (apt-get install systemd)")
        return
    with rep.check("systemd-analyze verify (units in a scratch root with the built binary)"):
        # A scratch root: the units' ExecStart path (/usr/local/bin/hotcount) must exist, and
        # the stock units (sysinit.target, ...) for their default dependencies.
        with tempfile.TemporaryDirectory(prefix="hc-deploy-") as root:
            os.makedirs(os.path.join(root, "usr", "local", "bin"))
            os.makedirs(os.path.join(root, "etc", "systemd", "system"))
            os.makedirs(os.path.join(root, "usr", "lib", "systemd"))
            shutil.copy(hotcount, os.path.join(root, "usr", "local", "bin", "hotcount"))
            stock = "/usr/lib/systemd/system" if os.path.isdir("/usr/lib/systemd/system") \
                else "/lib/systemd/system"
            if os.path.isdir(stock):
                shutil.copytree(stock, os.path.join(root, "usr", "lib", "systemd", "system"),
                                symlinks=True)
            for fname in units:
                shutil.copy(os.path.join(d, fname), os.path.join(root, "etc", "systemd", "system"))
            names = ["hotcount-stage1@s1-a.service", "hotcount-stage2@s2-a.service", "hotcount-init.service"]
            rc, out = run_tool(["systemd-analyze", "verify", f"--root={root}"] + names)
            # verify prints "..., ignoring" for a bad setting and still exits 0: any output
            # about our units is a problem.
            bad = [ln.replace(root, "") for ln in out.splitlines() if "hotcount" in ln]
            if rc != 0 or bad:
                rep.fail("deploy/systemd", "\n     ".join(bad or out.splitlines() or [f"exit {rc}"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hotcount", help="path to the built hotcount binary")
    ap.add_argument("--strict", action="store_true",
                    help="a missing promtool or systemd-analyze is a failure, not a skip")
    a = ap.parse_args()
    hotcount = os.path.abspath(a.hotcount)
    if not (os.path.isfile(hotcount) and os.access(hotcount, os.X_OK)):
        sys.stderr.write(f"check_deploy: {a.hotcount} is not an executable file\n")
        return 2
    strict = a.strict or os.environ.get("HC_DEPLOY_STRICT") == "1"

    rep = Report()
    docs = {}
    check_yaml_parses(rep, docs)
    metrics = {}
    with rep.check("the metric registry (hotcount metrics --markdown) parses"):
        metrics = parse_metrics_table(hotcount)
        if len(metrics) < 10:
            rep.fail("include/obs/hotcount/metric_defs.h", f"found only {len(metrics)} metrics")
    compose, invs = check_compose(rep, docs, hotcount)
    check_dockerfile(rep, hotcount)
    recorded = check_prometheus(rep, docs, compose, invs, metrics, strict)
    check_grafana(rep, docs, compose, metrics, recorded, strict)
    check_k8s(rep, docs, hotcount)
    check_systemd(rep, hotcount, strict)

    print(f"deploy: {rep.passed} passed, {rep.failed} failed, {rep.skipped} skipped")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
