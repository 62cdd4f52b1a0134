#!/usr/bin/env python3
"""Independent check of sagad's JSON contracts (make schemas-check).

  a. every schemas/*.schema.json is a valid JSON Schema draft 2020-12
     document that uses only keywords and formats this check enforces;
  b. every tests/fixtures/<schema>/valid/*.json validates against
     schemas/<schema>.schema.json and every .../invalid/*.json fails, with
     exactly one error: the one its line in .../invalid/EXPECT names;
  c. schemas/error_codes.json is well formed: unique codes, known classes,
     every code with its cause, its operator action and its agent_action;
  d. every error-code string literal in the C sources is registered, and
     where the source pairs a literal class with a literal code, the class
     agrees with the registry.

The validator is the Python jsonschema package, not sagad's C code, so the
schemas and the C validators are checked against each other by two
independent implementations.  Two points follow the JSON Schema spec (and
the C validators must do the same), not Python's defaults:
  - "pattern" is an ECMA-262 regex, where "$" matches only at the very end
    (Python's re also matches before a trailing newline);
  - "format" is an assertion: date-time is RFC 3339 section 5.6, checked by
    this file's own code so the result does not depend on which optional
    packages jsonschema found.

Exit status 0 when all is well (one summary line), 1 with one line per
problem otherwise.
"""

import calendar
import json
import re
import sys
from pathlib import Path

try:
    from jsonschema import Draft202012Validator, FormatChecker, validators
    from jsonschema.exceptions import SchemaError, ValidationError
except ImportError:
    sys.exit("schemas-check: needs the jsonschema package (Debian: python3-jsonschema; make deps)")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = ROOT / "schemas"
FIXTURE_DIR = ROOT / "tests" / "fixtures"
REGISTRY = SCHEMA_DIR / "error_codes.json"
SOURCE_DIRS = ("lib", "worker", "outbox", "dlq-tool")
DRAFT = "https://json-schema.org/draft/2020-12/schema"
CLASSES = ("transient", "throttled", "timeout", "permanent", "poison")
AREAS = ("input", "tool", "runtime", "pg", "kafka", "config", "cli", "relay", "worker", "dlq")

# A literal that looks like an error code: area, a dot, then lower-case
# parts.  Empty after the dot is allowed: "kafka." is a prefix the code
# completes at run time.
CODE_SHAPE = re.compile(r"(?:%s)\.[a-z0-9_.*]*" % "|".join(AREAS))
# A registered code: parts of [a-z0-9_] joined by dots, or a family "x.y.*",
# or a status family "x.y.{4xx}" (STATUS_FAMILIES).
REGISTRY_CODE = re.compile(r"(?:{0})(?:\.[a-z0-9_]+)+(?:\.\*|\.\{{[345]xx\}})?|(?:{0})\.\*"
                           .format("|".join(AREAS)))
# The only placeholders a code may end in: the HTTP statuses of one hundred.
# tool.http.{5xx} covers tool.http.500 .. tool.http.599 and nothing else; a
# status registered by itself (tool.http.429) takes precedence.
STATUS_FAMILIES = {"{3xx}": re.compile(r"3[0-9]{2}"), "{4xx}": re.compile(r"4[0-9]{2}"),
                   "{5xx}": re.compile(r"5[0-9]{2}")}
# A printf integer conversion: what fills in a status family at run time.
INT_CONV = re.compile(r"%(?:hh|h|ll|l|j|z|t)?[diu]")
PRINTF_CONV = re.compile(r"%[-+ #0]*[0-9*]*(?:\.[0-9*]+)?(?:hh|h|ll|l|j|z|t|L)?[diouxXcsp]")
CONFIG_ROW = re.compile(r'\{\s*"([^"\\]+)"\s*,\s*SG_CONFIG_[A-Z]+')
CLASS_THEN_CODE = re.compile(r'SG_ERRCLASS_([A-Z]+)\s*,\s*"([^"\\]*)"')

# Literals shaped like codes that are not error codes, and why.  Config keys
# need no entry: they are read from the config table.
NOT_CODES = {
    "relay.after_ack": "test failpoint name (SAGAD_TEST_FAILPOINT)",
    "relay.slow_produce": "test failpoint name (SAGAD_TEST_FAILPOINT)",
    "worker.h": "a header file name in an #include line",
    "dlq.h": "a header file name in an #include line",
}

KEYWORDS_2020_12 = {
    # core
    "$schema", "$id", "$ref", "$defs", "$comment", "$anchor", "$dynamicRef",
    "$dynamicAnchor", "$vocabulary",
    # applicators
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
    "prefixItems", "items", "contains", "properties", "patternProperties",
    "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    # validation
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
    "required", "dependentRequired",
    # annotations
    "format", "title", "description", "default", "deprecated", "readOnly", "writeOnly",
    "examples", "contentEncoding", "contentMediaType", "contentSchema",
}
SCHEMA_VALUED = {"not", "if", "then", "else", "items", "contains", "additionalProperties",
                 "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
SCHEMA_LIST_VALUED = {"allOf", "anyOf", "oneOf", "prefixItems"}
SCHEMA_MAP_VALUED = {"$defs", "properties", "patternProperties", "dependentSchemas"}


class Report:
    def __init__(self):
        self.problems = []

    def fail(self, where, what):
        self.problems.append("%s: %s" % (where, what))


def rel(path):
    return str(Path(path).relative_to(ROOT))


def load_json(path, report):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        report.fail(rel(path), "not readable JSON: %s" % e)
        return None


# --- formats and patterns as the spec says ---------------------------------

RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")


def is_rfc3339(text):
    """RFC 3339 section 5.6 date-time, with real calendar limits.  A leap
    second (:60) is accepted only where it can exist: 23:59:60 in UTC."""
    if not isinstance(text, str):
        return True
    m = RFC3339.fullmatch(text)
    if not m:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    sign, off_h, off_m = m.group(7), m.group(8), m.group(9)
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    if sign and (int(off_h) > 23 or int(off_m) > 59):
        return False
    if second == 60:
        utc_minutes = hour * 60 + minute
        if sign:
            offset = int(off_h) * 60 + int(off_m)
            utc_minutes -= offset if sign == "+" else -offset
        if utc_minutes % (24 * 60) != 23 * 60 + 59:
            return False
    return True


def ecma_regex(pattern):
    """Python regex with ECMA-262's meaning of an unescaped "$" (end of input
    only) outside character classes."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "$" and not in_class:
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


def pattern_keyword(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not re.search(ecma_regex(pattern), instance):
        yield ValidationError("%r does not match %r" % (instance, pattern))


FORMATS = FormatChecker()
FORMATS.checks("date-time")(is_rfc3339)
ENFORCED_FORMATS = {"date-time", "regex"}
Validator = validators.extend(Draft202012Validator, {"pattern": pattern_keyword})


# --- a. the schemas themselves ---------------------------------------------

def walk_keywords(node, where, report):
    """Fails on a keyword draft 2020-12 does not define (it would be
    silently ignored, so a typo would switch a rule off) and on a format
    this check does not enforce."""
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        report.fail(where, "a schema must be an object or a boolean")
        return
    for key, value in node.items():
        at = "%s/%s" % (where, key)
        if key not in KEYWORDS_2020_12:
            report.fail(at, "not a draft 2020-12 keyword (it would be ignored)")
        elif key == "format" and value not in ENFORCED_FORMATS:
            report.fail(at, "format %r is not enforced by this check" % value)
        elif key in SCHEMA_VALUED:
            walk_keywords(value, at, report)
        elif key in SCHEMA_LIST_VALUED and isinstance(value, list):
            for i, sub in enumerate(value):
                walk_keywords(sub, "%s/%d" % (at, i), report)
        elif key in SCHEMA_MAP_VALUED and isinstance(value, dict):
            for name, sub in value.items():
                walk_keywords(sub, "%s/%s" % (at, name), report)


def check_schemas(report):
    schemas = {}
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        schema = load_json(path, report)
        if schema is None:
            continue
        where = rel(path)
        if not isinstance(schema, dict) or schema.get("$schema") != DRAFT:
            report.fail(where, "must declare \"$schema\": %r" % DRAFT)
            continue
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as e:
            report.fail(where, "not a valid draft 2020-12 schema: %s" % e.message)
            continue
        walk_keywords(schema, where + "#", report)
        schemas[path.name[:-len(".schema.json")]] = schema
    if not schemas:
        report.fail(rel(SCHEMA_DIR), "no *.schema.json files")
    return schemas


# --- b. fixtures ------------------------------------------------------------

def pointer(path):
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def all_errors(errors):
    """The errors and, under oneOf/anyOf, the errors of each branch, less
    the branches the instance is not even the type of (they always fail)."""
    for e in errors:
        yield e
        yield from all_errors(c for c in e.context
                              if not (c.validator == "type" and c.absolute_path == e.absolute_path))


def read_expect(path, report):
    """EXPECT lines: FILE KEYWORD POINTER [; why], e.g.
    `bad-id.json  pattern  #/saga_id  ; no spaces`."""
    expect = {}
    if not path.exists():
        return expect
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split(";", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("#"):
            report.fail("%s:%d" % (rel(path), n), "expected `FILE KEYWORD #/POINTER`")
            continue
        if parts[0] in expect:
            report.fail("%s:%d" % (rel(path), n), "%s listed twice" % parts[0])
        expect[parts[0]] = (parts[1], parts[2])
    return expect


def check_invalid(validator, doc, expected, where, report):
    errors = list(validator.iter_errors(doc))
    if not errors:
        report.fail(where, "validates but is under invalid/")
        return
    if expected is None:
        report.fail(where, "no line in EXPECT says which rule it breaks")
        return
    keyword, ptr = expected
    if len(errors) > 1:
        report.fail(where, "breaks %d rules, fixtures break one: %s" % (
            len(errors), "; ".join("%s at %s" % (e.validator, pointer(e.absolute_path))
                                   for e in errors)))
        return
    if not any(e.validator == keyword and pointer(e.absolute_path) == ptr
               for e in all_errors(errors)):
        e = errors[0]
        report.fail(where, "fails on %s at %s (%s), EXPECT says %s at %s" % (
            e.validator, pointer(e.absolute_path), e.message, keyword, ptr))


def check_fixtures(schemas, report):
    counts = {"valid": 0, "invalid": 0}
    for name, schema in schemas.items():
        validator = Validator(schema, format_checker=FORMATS)
        base = FIXTURE_DIR / name
        for kind in ("valid", "invalid"):
            files = sorted((base / kind).glob("*.json"))
            if not files:
                report.fail(rel(base / kind), "no fixtures: every schema needs valid and invalid ones")
            expect = read_expect(base / kind / "EXPECT", report) if kind == "invalid" else {}
            for path in files:
                doc = load_json(path, report)
                if doc is None:
                    continue
                counts[kind] += 1
                where = rel(path)
                if kind == "valid":
                    for e in validator.iter_errors(doc):
                        report.fail(where, "should validate: %s at %s" % (
                            e.message, pointer(e.absolute_path)))
                else:
                    check_invalid(validator, doc, expect.pop(path.name, None), where, report)
            for stale in expect:
                report.fail(rel(base / kind / "EXPECT"), "names %s, which does not exist" % stale)
    if FIXTURE_DIR.is_dir():
        # Schema fixtures are the folders with valid/ or invalid/ inside;
        # others (exec/: child programs of the exec adapter tests) are not.
        for d in sorted(p for p in FIXTURE_DIR.iterdir() if p.is_dir()):
            if d.name not in schemas and ((d / "valid").is_dir() or (d / "invalid").is_dir()):
                report.fail(rel(d), "fixtures for schemas/%s.schema.json, which does not exist"
                            % d.name)
    return counts


# --- c. the error-code registry ---------------------------------------------

def check_registry(report):
    where = rel(REGISTRY)
    reg = load_json(REGISTRY, report)
    if reg is None:
        return {}
    if not isinstance(reg, dict) or reg.get("v") != 1 or not isinstance(reg.get("codes"), list):
        report.fail(where, 'must be {"v": 1, "codes": [...]}')
        return {}
    extra = set(reg) - {"v", "codes", "$comment"}
    if extra:
        report.fail(where, "unknown top-level keys %s" % sorted(extra))
    codes = {}
    for i, entry in enumerate(reg["codes"]):
        at = "%s: codes[%d]" % (where, i)
        if not isinstance(entry, dict):
            report.fail(at, "must be an object")
            continue
        # agent_action: every code has a default recovery instruction for
        # the producer, which events, envelopes and dead letters carry when
        # the tool sent none.
        missing = {"code", "class", "cause", "action", "agent_action"} - set(entry)
        unknown = set(entry) - {"code", "class", "cause", "action", "agent_action", "note"}
        if missing or unknown:
            report.fail(at, "missing %s, unknown %s" % (sorted(missing), sorted(unknown)))
            continue
        if any(not isinstance(v, str) or not v.strip() for v in entry.values()):
            report.fail(at, "every field must be a non-empty string")
            continue
        code = entry["code"]
        if not REGISTRY_CODE.fullmatch(code):
            report.fail(at, "code %r is not area.sub[.detail] (or a family area.sub.*) with area "
                        "one of %s" % (code, ", ".join(AREAS)))
        if entry["class"] not in CLASSES:
            report.fail(at, "class %r is not one of %s" % (entry["class"], ", ".join(CLASSES)))
        if code in codes:
            report.fail(at, "code %r registered twice" % code)
        codes[code] = entry["class"]
    return codes


# --- d. the codes in the C sources ------------------------------------------

def c_string_literals(text):
    """Yields (line, value) for each string literal of a C file, comments
    and character constants skipped, adjacent literals joined as the
    compiler joins them.  Escapes are kept as written."""
    i, line, n = 0, 1, len(text)
    pending = None  # (line, value) of a literal that may continue
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i = end
        elif c in "\"'":
            start_line, j = line, i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            value = text[i + 1:j]
            i = j + 1
            if c == "'":
                if pending:
                    yield pending
                    pending = None
            elif pending:
                pending = (pending[0], pending[1] + value)
            else:
                pending = (start_line, value)
        else:
            if pending:
                yield pending
                pending = None
            i += 1
    if pending:
        yield pending


def status_family_class(code, codes):
    """The class of code through a status family ("tool.http.503" ->
    tool.http.{5xx}), or None."""
    prefix, _, last = code.rpartition(".")
    for placeholder, digits in STATUS_FAMILIES.items():
        family = "%s.%s" % (prefix, placeholder)
        if family in codes and digits.fullmatch(last):
            return codes[family]
    return None


def class_of(code, codes):
    """The registered class of a concrete code: its own entry, else its
    status family."""
    return codes[code] if code in codes else status_family_class(code, codes)


def covered(literal, codes):
    """Registered exactly, under a family "x.y.*", or a status under its
    status family.  A formatted literal ("tool.http.%ld") is covered only
    by the status families of its prefix (one integer conversion, last), a
    bare prefix ("kafka.") only by a "x.y.*" family."""
    families = [c[:-1] for c in codes if c.endswith(".*")]
    conv = PRINTF_CONV.search(literal)
    if conv and INT_CONV.fullmatch(conv.group()) and conv.end() == len(literal):
        prefix = literal[:conv.start()]
        if any(prefix + p in codes for p in STATUS_FAMILIES):
            return True
    if conv or literal.endswith("."):
        fixed = literal[:conv.start()] if conv else literal
        return any(fixed.startswith(f) for f in families)
    return class_of(literal, codes) is not None or any(literal.startswith(f) for f in families)


def check_sources(codes, report):
    files = sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*") if p.suffix in (".c", ".h"))
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in files}
    config_keys = {k for t in texts.values() for k in CONFIG_ROW.findall(t)}
    seen = set()
    for path, text in texts.items():
        for line, literal in c_string_literals(text):
            shape = PRINTF_CONV.sub("x", literal)
            if not CODE_SHAPE.fullmatch(shape) or literal in config_keys or literal in NOT_CODES:
                continue
            seen.add(literal)
            if not covered(literal, codes):
                report.fail("%s:%d" % (rel(path), line),
                            "error code \"%s\" is not in %s (register it; if it is not an error "
                            "code, add it to NOT_CODES in %s with the reason)"
                            % (literal, rel(REGISTRY), rel(__file__)))
        # Where the source pairs a literal class with a literal code, the
        # registry must say the same.
        for m in CLASS_THEN_CODE.finditer(text):
            cls, code = m.group(1).lower(), m.group(2)
            registered = class_of(code, codes)
            if registered is not None and registered != cls:
                report.fail("%s:%d" % (rel(path), text.count("\n", 0, m.start()) + 1),
                            "\"%s\" is raised as %s here but registered as %s"
                            % (code, cls, registered))
    return len(files), seen


def main():
    report = Report()
    schemas = check_schemas(report)
    counts = check_fixtures(schemas, report)
    codes = check_registry(report)
    nfiles, seen = check_sources(codes, report)
    for problem in report.problems:
        print(problem)
    summary = ("%d schemas, %d valid + %d invalid fixtures, %d registered codes, "
               "%d code literals in %d C files" % (len(schemas), counts["valid"], counts["invalid"],
                                                  len(codes), len(seen), nfiles))
    if report.problems:
        print("schemas-check: FAILED, %d problems (%s)" % (len(report.problems), summary))
        return 1
    print("schemas-check: ok, %s (jsonschema %s)" % (summary, jsonschema_version()))
    return 0


def jsonschema_version():
    try:
        from importlib.metadata import version
        return version("jsonschema")
    except Exception:  # noqa: BLE001 - only for the summary line
        return "?"


if __name__ == "__main__":
    sys.exit(main())
