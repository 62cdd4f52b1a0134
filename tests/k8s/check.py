#!/usr/bin/env python3
"""What the API schemas cannot know about sagad's manifests.

    check.py --bin BINDIR [--partitions N] [--k8s-version V] RENDERED.yaml...

For each rendered kustomization:
- every core object validates strictly (unknown fields refused) against the
  Kubernetes JSON schemas of kubernetes-validate;
- every sagad container's config resolves: each SAGAD_* variable is a key of
  the config table (read from the program's `--config-reference`), each key
  of the mounted config file too, the real binary accepts the result
  (`--print-config`), and the required keys are set (pg.dsn; the Kafka
  bootstrap servers and, for the worker, a tool registry that
  `check-registry` accepts);
- the gateway's signing key, users file and TLS key are files of a mounted
  Secret, both of the first are set, and the tool registry is mounted;
- probes hit /healthz and /readyz on the configured http.port (the
  gateway's: gateway.port, over HTTPS with gateway.tls_cert), bound to
  0.0.0.0; the worker's grace period exceeds its longest tool timeout plus
  worker.drain_timeout_ms; containers run non-root, read-only, without
  privilege escalation or capabilities, with memory requests and limits;
- the autoscalers stay at or under the partition count, and the KEDA Kafka
  triggers watch the workers' own group and brokers, one for each of their
  two topics (commands and internal); the relay and the gateway run at
  least two replicas;
- with Strimzi KafkaUsers, each component logs in as its own, allowed what
  it does: the worker and KEDA write nothing, the worker reads and KEDA
  describes sagad.internal, only the relay writes it, the gateway only
  writes topic.commands and reads topic.events;
- the metric names the alerts and the Grafana dashboards (ConfigMaps
  labelled grafana_dashboard) use are listed (and must be in
  docs/METRICS.md once it exists).
Every problem is printed as FILE: KIND NAME: container: text; exit 1 if any.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

try:
    import kubernetes_validate
except ImportError:  # pragma: no cover - install.sh provides it
    sys.exit("k8s-check: kubernetes-validate is missing: run tests/k8s/install.sh")

SAGAD_PROGS = ("sagad-worker", "sagad-relay", "dlq-tool", "sagad-gateway")
CRD_GROUPS = ("keda.sh/", "monitoring.coreos.com/", "kafka.strimzi.io/")
KAFKA_CLOSE_BOUND_MS = 10000
TOOL_TIMEOUT_DEFAULT_MS = 30000  # schemas/tool-registry.schema.json


class Problems:
    def __init__(self):
        self.count = 0

    def __call__(self, where, text):
        print(f"{where}: {text}", file=sys.stderr)
        self.count += 1


problem = Problems()


class Tables:
    """Each program's config table, read once from its --config-reference."""

    def __init__(self, bindir):
        self.bindir = bindir
        self.tables = {}

    def get(self, prog):
        if prog not in self.tables:
            self.tables[prog] = config_table(self.bindir, prog)
        return self.tables[prog]


def config_table(bindir, prog):
    """{key: {"env": ..., "default": ... or None}} from --config-reference."""
    path = os.path.join(bindir, prog)
    if not os.access(path, os.X_OK):
        sys.exit(f"k8s-check: {path} is not built (make all)")
    out = subprocess.run([path, "--config-reference"],
                         check=True, capture_output=True, text=True).stdout
    table = {}
    row = re.compile(r"^\| `([^`]+)` \| `(SAGAD_[A-Z0-9_]+)` \| (\w+) \| ([^|]*) \|")
    for line in out.splitlines():
        m = row.match(line)
        if m:
            default = m.group(4).strip()
            default = {"(required)": None, "(empty)": ""}.get(default, default)
            table[m.group(1)] = {"env": m.group(2), "default": default}
    if not table:
        sys.exit(f"k8s-check: no keys parsed from {prog} --config-reference")
    return table


def kafka_key_from_env(name):
    """SAGAD_KAFKA_SASL_PASSWORD -> kafka.sasl.password; "__" -> "_" (lib/infra/sg_config.c)."""
    rest = name[len("SAGAD_KAFKA_"):]
    return "kafka." + "_".join(chunk.replace("_", ".").lower() for chunk in rest.split("__"))


def parse_config_file(text):
    """`key = value` lines as lib/infra/sg_config.c reads them."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        values[key] = value
    return values


class Render:
    """One rendered kustomization."""

    def __init__(self, path, docs):
        self.path = path
        self.objects = [d for d in docs if d]
        self.configmaps = {o["metadata"]["name"]: o.get("data", {})
                           for o in self.objects if o["kind"] == "ConfigMap"}

    def find(self, kind, name=None):
        return [o for o in self.objects
                if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def mounted_file(render, pod, container, path):
    """The content of path if a ConfigMap volume mounted in container holds
    it, else None."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        vol = volumes.get(mount["name"], {})
        cm = vol.get("configMap")
        if cm is None:
            continue
        return render.configmaps.get(cm["name"], {}).get(path[len(prefix):])
    return None


def mounted_secret(pod, container, path):
    """"SECRET/KEY" if a Secret volume, or a projected volume's Secret,
    mounted in container holds path, else None."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount.get("subPath"):
            if path != mount["mountPath"]:
                continue
            rel = mount["subPath"]
        else:
            prefix = mount["mountPath"].rstrip("/") + "/"
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix):]
        vol = volumes.get(mount["name"], {})
        sources = [vol["secret"]] if "secret" in vol else []
        sources += [s["secret"] for s in vol.get("projected", {}).get("sources", [])
                    if "secret" in s]
        for sec in sources:
            name = sec.get("secretName") or sec.get("name")
            if "items" not in sec:
                return f"{name}/{rel}"  # every key of the Secret is a file
            for item in sec["items"]:
                if item["path"] == rel:
                    return f"{name}/{item['key']}"
    return None


def resolve_env(render, where, container, secrets):
    """SAGAD_* variables with placeholders for Secret and field references."""
    env = {}
    for e in container.get("env", []):
        name = e["name"]
        if "value" in e:
            env[name] = str(e["value"])
            continue
        ref = e.get("valueFrom", {})
        if "secretKeyRef" in ref:
            s = ref["secretKeyRef"]
            secrets.add(f"{s['name']}/{s['key']}")
            env[name] = f"secret-{s['name']}-{s['key']}"
        elif "configMapKeyRef" in ref:
            c = ref["configMapKeyRef"]
            value = render.configmaps.get(c["name"], {}).get(c["key"])
            if value is None:
                problem(where, f"env {name}: ConfigMap {c['name']} has no key {c['key']}")
                value = ""
            env[name] = value
        elif "fieldRef" in ref:
            env[name] = "field-" + ref["fieldRef"]["fieldPath"]
        else:
            problem(where, f"env {name}: valueFrom of an unsupported kind")
    return env


def effective_config(table, where, env, file_values):
    """Defaults, then the file, then the environment, as sg_config does."""
    cfg = {k: v["default"] for k, v in table.items()}
    env_to_key = {v["env"]: k for k, v in table.items()}
    for key, value in file_values.items():
        if key in table or (key.startswith("kafka.") and len(key) > 6):
            cfg[key] = value
        else:
            problem(where, f"config file key {key} is not in the config table (docs/CONFIGURATION.md)")
    for name, value in env.items():
        if not name.startswith("SAGAD_") or name == "SAGAD_CONFIG":
            continue
        if name.startswith("SAGAD_KAFKA_"):
            cfg[kafka_key_from_env(name)] = value
        elif name in env_to_key:
            cfg[env_to_key[name]] = value
        else:
            problem(where, f"env {name} is not a config key's variable (docs/CONFIGURATION.md)")
    return cfg


def run_binary(bindir, prog, args, env, where, what):
    run_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    run_env.update({k: v for k, v in env.items() if k != "SAGAD_CONFIG"})
    res = subprocess.run([os.path.join(bindir, prog)] + args, env=run_env, capture_output=True,
                         text=True)
    if res.returncode != 0:
        problem(where, f"{what}: {prog} {' '.join(args)} exits {res.returncode}: "
                       f"{res.stderr.strip()}")
    return res


def check_probes(where, container, cfg, table, prefix="http", tls=False):
    """Probes on PREFIX.port (http, or gateway for the gateway), bound to 0.0.0.0."""
    bind_key, port_key = f"{prefix}.bind", f"{prefix}.port"
    missing = [k for k in (bind_key, port_key) if k not in cfg]
    if missing:
        problem(where, f"{' and '.join(missing)} not in the program's config table "
                       "(--config-reference)")
        return
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    want_port = int(cfg[port_key])
    if cfg[bind_key] != "0.0.0.0":
        problem(where, f"{bind_key} is {cfg[bind_key]}: the kubelet's probes cannot reach it "
                       f"(set {table[bind_key]['env']}=0.0.0.0)")
    scheme = "HTTPS" if tls else "HTTP"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet")
        if not get:
            problem(where, f"{probe} is missing (an httpGet on {path})")
            continue
        port = ports.get(get["port"], get["port"])
        if get.get("path") != path:
            problem(where, f"{probe} asks {get.get('path')}, sagad serves {path}")
        if port != want_port:
            problem(where, f"{probe} port {get['port']} is not {port_key} {want_port}")
        if get.get("scheme", "HTTP") != scheme:
            problem(where, f"{probe} scheme is {get.get('scheme', 'HTTP')}, the port serves "
                           f"{scheme}" + (" (gateway.tls_cert is set)" if tls else ""))


def check_gateway(render, where, pod, container, cfg, secrets):
    """The gateway's private files come from Secrets, it has a key to sign
    with and a users file, and it can read the tool registry."""
    for key in ("gateway.key", "gateway.users", "gateway.tls_key", "gateway.tls_cert"):
        path = cfg.get(key) or ""
        if not path:
            continue
        ref = mounted_secret(pod, container, path)
        if ref is not None:
            secrets.add(ref)
        elif key == "gateway.tls_cert" and mounted_file(render, pod, container, path) is not None:
            pass  # a certificate is public: a ConfigMap will do
        else:
            problem(where, f"{key} {path} is not in a mounted Secret")
    if not cfg.get("gateway.key"):
        problem(where, "gateway.key is required: the key the gateway signs for its users with "
                       "(a keyring principal with the delegate role)")
    if not cfg.get("gateway.users"):
        problem(where, "gateway.users is required: without it nobody authenticates (a trusted "
                       "proxy's user must be in it too)")
    if mounted_file(render, pod, container, cfg["worker.registry"]) is None:
        problem(where, f"worker.registry {cfg['worker.registry']} is not in a mounted ConfigMap "
                       "(the gateway checks submissions against it)")
    if bool(cfg.get("gateway.tls_cert")) != bool(cfg.get("gateway.tls_key")):
        problem(where, "gateway.tls_cert and gateway.tls_key are set together or not at all")


def check_security(where, pod, container):
    psc, csc = pod.get("securityContext", {}), container.get("securityContext", {})
    if not (csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
        problem(where, "runAsNonRoot is not true")
    if csc.get("runAsUser", psc.get("runAsUser")) in (None, 0):
        problem(where, "runAsUser must be a non-zero uid (the image's user is 10001)")
    if csc.get("readOnlyRootFilesystem") is not True:
        problem(where, "readOnlyRootFilesystem is not true")
    if csc.get("allowPrivilegeEscalation") is not False:
        problem(where, "allowPrivilegeEscalation is not false")
    if "ALL" not in csc.get("capabilities", {}).get("drop", []):
        problem(where, "capabilities.drop does not include ALL")
    res = container.get("resources", {})
    for part in ("requests", "limits"):
        if "memory" not in res.get(part, {}):
            problem(where, f"resources.{part}.memory is not set")


def check_container(args, tables, render, obj, pod, container, secrets, seen):
    prog = os.path.basename((container.get("command") or [""])[0])
    if prog not in SAGAD_PROGS:
        return
    table = tables.get(prog)
    cmd = (container.get("args") or [""])[0]
    where = f"{render.path}: {obj['kind']} {obj['metadata']['name']}: {container['name']}"
    env = resolve_env(render, where, container, secrets)
    file_values, config_text = {}, None
    if "SAGAD_CONFIG" in env:
        config_text = mounted_file(render, pod, container, env["SAGAD_CONFIG"])
        if config_text is None:
            problem(where, f"SAGAD_CONFIG {env['SAGAD_CONFIG']} is not in a mounted ConfigMap")
        else:
            file_values = parse_config_file(config_text)
    cfg = effective_config(table, where, env, file_values)

    with tempfile.TemporaryDirectory() as tmp:
        cli = []
        if config_text is not None:
            path = os.path.join(tmp, "sagad.conf")
            with open(path, "w") as f:
                f.write(config_text)
            cli = ["--config", path]
        run_binary(args.bin, prog, cli + ["--print-config"], env, where, "the config")
        if cfg.get("pg.dsn") is None:
            problem(where, "pg.dsn is required: set SAGAD_PG_DSN from the Secret")
        if cmd == "run" and not cfg.get("kafka.bootstrap.servers"):
            problem(where, "kafka.bootstrap.servers is required (sagad.conf or "
                           "SAGAD_KAFKA_BOOTSTRAP_SERVERS)")
        tool_max_ms = 0
        if prog == "sagad-worker" and cmd == "run":
            registry = mounted_file(render, pod, container, cfg["worker.registry"])
            if registry is None:
                problem(where, f"worker.registry {cfg['worker.registry']} is not in a mounted "
                               "ConfigMap")
            else:
                reg_path = os.path.join(tmp, "tools.json")
                with open(reg_path, "w") as f:
                    f.write(registry)
                run_binary(args.bin, prog, cli + ["check-registry", reg_path], env, where,
                           "the tool registry")
                try:
                    tools = json.loads(registry).get("tools", {})
                    tool_max_ms = max((t.get("timeout_ms", TOOL_TIMEOUT_DEFAULT_MS)
                                       for t in tools.values()), default=0)
                except (ValueError, AttributeError):
                    pass  # check-registry said why
    if prog == "sagad-gateway":
        check_gateway(render, where, pod, container, cfg, secrets)
    if cmd != "run":
        check_security(where, pod, container)
        return
    if prog == "sagad-gateway":
        check_probes(where, container, cfg, table, "gateway", tls=bool(cfg.get("gateway.tls_cert")))
    else:
        check_probes(where, container, cfg, table)
    check_security(where, pod, container)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if prog == "sagad-worker":
        # The group leave (both consumers) is bounded at 10 s (sg_kafka.h SG_KAFKA_CLOSE_MS).
        need_ms = tool_max_ms + int(cfg["worker.drain_timeout_ms"]) + KAFKA_CLOSE_BOUND_MS
        if grace * 1000 <= need_ms:
            problem(where, f"terminationGracePeriodSeconds {grace} must exceed the longest tool "
                           f"timeout plus worker.drain_timeout_ms plus the 10 s bound on "
                           f"leaving the Kafka group ({need_ms} ms)")
    if prog == "sagad-relay" and grace * 1000 <= int(cfg["relay.delivery_timeout_ms"]):
        problem(where, f"terminationGracePeriodSeconds {grace} must exceed "
                       f"relay.delivery_timeout_ms ({cfg['relay.delivery_timeout_ms']} ms)")
    seen[(obj["kind"], obj["metadata"]["name"])] = cfg


def check_scaling(args, render, seen):
    for hpa in render.find("HorizontalPodAutoscaler"):
        where = f"{render.path}: HorizontalPodAutoscaler {hpa['metadata']['name']}"
        if hpa["spec"]["maxReplicas"] > args.partitions:
            problem(where, f"maxReplicas {hpa['spec']['maxReplicas']} exceeds the "
                           f"{args.partitions} partitions of topic.internal")
    for so in render.find("ScaledObject"):
        where = f"{render.path}: ScaledObject {so['metadata']['name']}"
        spec = so["spec"]
        if spec.get("maxReplicaCount", 100) > args.partitions:
            problem(where, f"maxReplicaCount {spec.get('maxReplicaCount', 100)} exceeds the "
                           f"{args.partitions} partitions of topic.internal")
        cfg = seen.get(("Deployment", spec["scaleTargetRef"]["name"]))
        if cfg is None:
            problem(where, f"scales {spec['scaleTargetRef']['name']}, not a sagad worker here")
            continue
        # The workers read two topics: their lag on each is work waiting.
        want_topics = {cfg.get("topic.commands"), cfg.get("topic.internal")}
        topics = []
        for trig in spec.get("triggers", []):
            if trig["type"] != "kafka":
                continue
            md = trig.get("metadata", {})
            for field, key in (("bootstrapServers", "kafka.bootstrap.servers"),
                               ("consumerGroup", "worker.group_id")):
                if md.get(field) != cfg.get(key):
                    problem(where, f"kafka trigger {field} {md.get(field)!r} differs from the "
                                   f"workers' {key} {cfg.get(key)!r}")
            if md.get("topic") not in want_topics:
                problem(where, f"kafka trigger topic {md.get('topic')!r} is neither of the "
                               f"workers' topic.commands and topic.internal "
                               f"{sorted(t for t in want_topics if t)!r}")
            topics.append(md.get("topic"))
        for t in sorted(t for t in want_topics if t):
            if topics.count(t) != 1:
                problem(where, f"{topics.count(t)} kafka triggers on {t!r}: the lag of each "
                               "topic the workers read needs exactly one")
    for dep in render.find("Deployment", "sagad-relay"):
        if dep["spec"].get("replicas", 1) < 2:
            problem(f"{render.path}: Deployment sagad-relay",
                    "replicas must be at least 2 (an active relay and a standby)")
    for dep in render.find("Deployment", "sagad-gateway"):
        if dep["spec"].get("replicas", 1) < 2:
            problem(f"{render.path}: Deployment sagad-gateway",
                    "replicas must be at least 2 (its PodDisruptionBudget keeps one through a "
                    "drain: with one replica no node it runs on could be drained)")


def undocumented(names, where, what):
    if not os.path.exists("docs/METRICS.md"):
        return
    documented = set(re.findall(r"^\| `(sagad_[a-z0-9_]+)` \|", open("docs/METRICS.md").read(),
                                re.M))
    for name in sorted(names):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in documented and base not in documented:
            problem(where, f"{what} use {name}, which docs/METRICS.md does not document")


def check_alerts(render):
    names = set()
    for rule in render.find("PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for r in group["rules"]:
                names.update(re.findall(r"\bsagad_[a-z0-9_]+", r["expr"]))
    undocumented(names, f"{render.path}: PrometheusRule", "alerts")
    return names


def dashboard_exprs(node):
    """Every query of a Grafana dashboard: targets' and variables' expr/query."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ("expr", "query", "definition") and isinstance(val, str):
                yield val
            else:
                yield from dashboard_exprs(val)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_exprs(item)


def check_dashboards(render):
    """ConfigMaps for Grafana's sidecar (label grafana_dashboard): each JSON
    file must parse, and every sagad_ metric its queries use be documented."""
    names = set()
    for cm in render.find("ConfigMap"):
        if cm.get("metadata", {}).get("labels", {}).get("grafana_dashboard") != "1":
            continue
        where = f"{render.path}: ConfigMap {cm['metadata']['name']}"
        for fname, text in (cm.get("data") or {}).items():
            try:
                dash = json.loads(text)
            except ValueError as e:
                problem(where, f"{fname} is not JSON: {e}")
                continue
            used = set()
            for expr in dashboard_exprs(dash):
                used.update(re.findall(r"\bsagad_[a-z0-9_]+", expr))
            if not used:
                problem(where, f"{fname}: no query uses a sagad_ metric")
            undocumented(used, where, f"dashboard {fname} queries")
            names |= used
    return names


# What a principal may be granted when its component only reads (worker)
# or only looks (KEDA): none of these.
KAFKA_WRITE_OPS = {"Write", "Create", "Delete", "Alter", "AlterConfigs", "ClusterAction",
                   "IdempotentWrite", "All"}
INTERNAL_TOPIC = "sagad.internal"
GATEWAY_EVENTS_GROUP = "sagad-gateway-events"  # gateway/gw_events.c


def kafka_password_secret(obj):
    """The Secret of a Deployment's SAGAD_KAFKA_SASL_PASSWORD, or of a KEDA
    TriggerAuthentication's password; None without one."""
    if obj["kind"] == "TriggerAuthentication":
        return next((r["name"] for r in obj["spec"].get("secretTargetRef", [])
                     if r["parameter"] == "password"), None)
    for c in obj["spec"]["template"]["spec"]["containers"]:
        for e in c.get("env", []):
            if e["name"] == "SAGAD_KAFKA_SASL_PASSWORD":
                return e.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
    return None


def allowed_ops(user):
    acls = user["spec"].get("authorization", {}).get("acls", [])
    return [(a["resource"], set(a["operations"])) for a in acls if a.get("type", "allow") == "allow"]


def names_topic(resource, topic):
    name = resource.get("name", "")
    if resource["type"] != "topic":
        return False
    return name == "*" or name == topic or (resource.get("patternType") == "prefix"
                                            and topic.startswith(name))


def check_gateway_acls(where, user, cfg):
    """The gateway writes topic.commands, reads topic.events for its event
    streams outside any group (librdkafka still looks up the coordinator of
    their group.id), and nothing else."""
    allowed = {("topic", cfg.get("topic.commands", "sagad.commands")): {"Write", "Describe"},
               ("topic", cfg.get("topic.events", "sagad.events")): {"Read", "Describe"},
               ("group", GATEWAY_EVENTS_GROUP): {"Read", "Describe"}}
    name = user["metadata"]["name"]
    for resource, ops in allowed_ops(user):
        key = (resource["type"], resource.get("name"))
        literal = resource.get("patternType", "literal") == "literal"
        extra = ops - allowed.get(key, set()) if literal else ops
        if extra:
            problem(where, f"KafkaUser {name} may {', '.join(sorted(extra))} on {key[0]} "
                           f"{key[1]}{'' if literal else ' (a prefix)'}; the gateway writes "
                           f"only topic.commands and reads only topic.events")


def check_principals(render, configs):
    """With Strimzi KafkaUsers: the worker, the relay, the gateway and KEDA
    each log in as a KafkaUser of their own (its password is their
    Secret's), the worker's and KEDA's write nothing, KEDA's only describes,
    the gateway's only writes topic.commands and reads topic.events, the
    worker's reads sagad.internal and KEDA's describes it, and only the
    relay's writes it (docs/OPERATIONS.md, "Kafka
    principals"; docs/GATEWAY-DEPLOY.md)."""
    kafka_users = render.find("KafkaUser")
    if not kafka_users:
        return
    users = {}  # password Secret -> KafkaUser; one with a generated password has none
    for u in kafka_users:
        ref = (u["spec"].get("authentication", {}).get("password", {})
               .get("valueFrom", {}).get("secretKeyRef", {}))
        if ref.get("name"):
            users[ref["name"]] = u
    holders = [(f"Deployment {d['metadata']['name']}", d["metadata"]["name"], kafka_password_secret(d))
               for d in render.find("Deployment")]
    holders += [(f"TriggerAuthentication {t['metadata']['name']}", "keda", kafka_password_secret(t))
                for t in render.find("TriggerAuthentication")]
    relay_user = None
    seen = {}
    for what, component, secret in holders:
        where = f"{render.path}: {what}"
        user = users.get(secret) if secret else None
        if user is None:
            problem(where, f"its Kafka password Secret {secret} is no KafkaUser's")
            continue
        name = user["metadata"]["name"]
        if name in seen:
            problem(where, f"shares the KafkaUser {name} with {seen[name]}")
        seen[name] = what
        ops = set().union(*(o for _, o in allowed_ops(user)))
        if component == "sagad-relay":
            relay_user = name
        if component in ("sagad-worker", "keda") and ops & KAFKA_WRITE_OPS:
            problem(where, f"KafkaUser {name} may {', '.join(sorted(ops & KAFKA_WRITE_OPS))}, "
                           "which its component never does")
        if component == "keda" and ops - {"Describe"}:
            problem(where, f"KafkaUser {name} may {', '.join(sorted(ops - {'Describe'}))}; "
                           "lag needs Describe only")
        if component == "sagad-gateway":
            check_gateway_acls(where, user, configs.get(("Deployment", component), {}))
        # The workers consume the internal topic, and KEDA scales on its lag.
        need = {"sagad-worker": "Read", "keda": "Describe"}.get(component)
        if need and not any(names_topic(r, INTERNAL_TOPIC) and ops_on & {need, "All"}
                            for r, ops_on in allowed_ops(user)):
            problem(where, f"KafkaUser {name} may not {need} {INTERNAL_TOPIC}, which its "
                           "component needs")
    for u in kafka_users:
        name = u["metadata"]["name"]
        if name == relay_user:
            continue
        for resource, ops in allowed_ops(u):
            if names_topic(resource, INTERNAL_TOPIC) and ops & {"Write", "All"}:
                problem(f"{render.path}: KafkaUser {name}",
                        f"may write {INTERNAL_TOPIC}, which only the relay writes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin")
    ap.add_argument("--partitions", type=int, default=6,
                    help="partitions of topic.internal and topic.commands (sagad-worker "
                         "topics' default)")
    ap.add_argument("--k8s-version", default="1.30.0")
    ap.add_argument("rendered", nargs="+")
    args = ap.parse_args()
    tables = Tables(args.bin)
    metrics, secrets, dashboards = set(), set(), set()
    for path in args.rendered:
        with open(path) as f:
            render = Render(path, list(yaml.safe_load_all(f)))
        seen = {}
        for obj in render.objects:
            where = f"{path}: {obj['kind']} {obj['metadata']['name']}"
            if obj["kind"] == "Secret":
                problem(where, "Secrets do not belong in the manifests; reference them")
            if not obj["apiVersion"].startswith(CRD_GROUPS):
                try:
                    kubernetes_validate.validate(obj, args.k8s_version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    problem(where, f"{'/'.join(str(p) for p in e.path) or '/'}: {e.message}")
                except kubernetes_validate.SchemaNotFoundError as e:
                    problem(where, e.message)
            pod = obj.get("spec", {}).get("template", {}).get("spec")
            if obj["kind"] in ("Deployment", "Job") and pod:
                for c in pod.get("initContainers", []) + pod["containers"]:
                    check_container(args, tables, render, obj, pod, c, secrets, seen)
        if not any(k == "Deployment" for k, _ in seen):
            problem(path, "no sagad Deployment found")
        check_scaling(args, render, seen)
        check_principals(render, seen)
        metrics |= check_alerts(render)
        dashboards |= check_dashboards(render)
    if problem.count:
        print(f"k8s-check: {problem.count} problem(s)", file=sys.stderr)
        return 1
    print(f"k8s-check: {', '.join(args.rendered)}: config, probes, security, scaling ok")
    print(f"k8s-check: secrets the cluster must hold: {', '.join(sorted(secrets))}")
    print(f"k8s-check: metrics the alerts use: {', '.join(sorted(metrics))}")
    print(f"k8s-check: metrics the dashboards use: {', '.join(sorted(dashboards))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
