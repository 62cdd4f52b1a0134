"""Checks schemas/openapi.yaml (tests/api/run.sh runs it first):

  1. it is a valid OpenAPI 3.1 document (openapi-spec-validator);
  2. its copies of the message schemas are those of schemas/: SagaStart*
     is saga-start.schema.json with saga_id and id optional (the gateway
     fills them in), Event* is event.schema.json (the data of each
     Server-Sent Event), each with its $defs as components: a change to a
     message schema that is not carried over fails here;
  3. it documents exactly the routes of gateway/gw_server.c's table, with
     their methods, and the probes: a route added to the gateway without
     its contract (or a contract of a route that is gone) fails here.

  spec_check.py [--print-embedded]   (the latter prints the YAML of those
                                      components, to paste after a change)
"""
import copy
import json
import re
import sys
import textwrap
from pathlib import Path

import yaml
from openapi_spec_validator import validate

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "schemas/openapi.yaml"
ROUTES_C = ROOT / "gateway/gw_server.c"
# Component name prefix, its source, and the members it does not require:
# the gateway makes a submission's saga_id and id.
EMBEDDED = (
    ("SagaStart", ROOT / "schemas/saga-start.schema.json", ("id", "saga_id")),
    ("Event", ROOT / "schemas/event.schema.json", ()),
)


def rewrite_refs(node, prefix):
    if isinstance(node, dict):
        return {k: ("#/components/schemas/%s.%s" % (prefix, v[len("#/$defs/"):])
                    if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/")
                    else rewrite_refs(v, prefix))
                for k, v in node.items()}
    if isinstance(node, list):
        return [rewrite_refs(v, prefix) for v in node]
    return node


def embedded_components():
    """The components the spec must hold, from the message schemas."""
    out = {}
    for prefix, path, optional in EMBEDDED:
        src = json.loads(path.read_text())
        root = copy.deepcopy(src)
        for k in ("$schema", "$id", "$defs"):
            root.pop(k, None)
        root["required"] = [r for r in root["required"] if r not in optional]
        out[prefix] = rewrite_refs(root, prefix)
        for name, d in src.get("$defs", {}).items():
            out["%s.%s" % (prefix, name)] = rewrite_refs(d, prefix)
    return out


def gateway_routes():
    """(METHOD, path with parameters as {}) of the gateway's table and probes."""
    text = ROUTES_C.read_text()
    table = re.search(r"static const (?:gw_)?route_t routes\[\] = \{(.*?)\n\};", text, re.S)
    if not table:
        sys.exit("spec_check: cannot find the routes[] table in %s" % ROUTES_C)
    routes = set()
    for method, tmpl in re.findall(r'\{\s*"([A-Z]+)",\s*"([^"]+)",\s*\w+\s*\}', table.group(1)):
        # {verb} is approve or reject (match() in gw_server.c).
        for t in ([tmpl.replace("{verb}", v) for v in ("approve", "reject")]
                  if "{verb}" in tmpl else [tmpl]):
            routes.add((method, re.sub(r"\{[^}]+\}", "{}", t)))
    for probe in re.findall(r'strcmp\(path, "(/[a-z]+)"\) == 0', text):
        routes.add(("GET", probe))
    # Not the REST API: POST /mcp is JSON-RPC for agents (docs/AGENTS.md,
    # its own suite tests/mcp/), and the console's files and sessions at /,
    # /assets/ and /console/ (gateway/gw_console.c, docs/CONSOLE.md) are
    # served outside this table, for browsers.
    routes.discard(("POST", "/mcp"))
    return routes


def spec_routes(spec):
    out = set()
    for path, item in spec["paths"].items():
        for method in item:
            if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                out.add((method.upper(), re.sub(r"\{[^}]+\}", "{}", path)))
    return out


def main():
    if "--print-embedded" in sys.argv:
        # Indented to sit under components.schemas.
        print(textwrap.indent(yaml.safe_dump(embedded_components(), sort_keys=False,
                                             width=96, allow_unicode=True), "    "), end="")
        return 0
    spec = yaml.safe_load(SPEC.read_text())
    failures = []
    try:
        validate(spec)
    except Exception as e:  # the validator's own error names the place
        failures.append("not a valid OpenAPI 3.1 document: %s" % e)
    want = embedded_components()
    prefixes = tuple(prefix for prefix, _, _ in EMBEDDED)
    have = {k: v for k, v in spec.get("components", {}).get("schemas", {}).items()
            if k in prefixes or k.split(".")[0] in prefixes}
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            failures.append("components.schemas.%s differs from schemas/ (run "
                            "tests/api/spec_check.py --print-embedded and paste it)" % name)
    code, doc = gateway_routes(), spec_routes(spec)
    for m, p in sorted(code - doc):
        failures.append("%s %s is served by the gateway (%s) but not in the spec"
                        % (m, p, ROUTES_C.relative_to(ROOT)))
    for m, p in sorted(doc - code):
        failures.append("%s %s is in the spec but the gateway does not serve it" % (m, p))
    for f in failures:
        print("spec_check: " + f, file=sys.stderr)
    if failures:
        return 1
    print("spec_check: %s is valid OpenAPI 3.1, holds %s as they are, and documents "
          "the gateway's %d routes" % (SPEC.relative_to(ROOT), " and ".join(
              str(path.relative_to(ROOT)) for _, path, _ in EMBEDDED), len(code)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
