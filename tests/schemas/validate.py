#!/usr/bin/env python3
"""Validates outputs generated under JSON-schema grammars (test_grammar_schema).

Input: a JSONL file, one {"schema": path, "text": output, "ended": bool} per
line. Every output that ended (end-of-generation token) must parse as JSON
and validate against its schema (formats checked too); an output cut by the
token limit must be a prefix the grammar allowed, which the C side checks.
Exit status 1 on any invalid output.
"""
import datetime
import json
import re
import sys
import uuid

import jsonschema

# Strict checks of the formats the compiler supports (RFC 3339 date, time,
# date-time; RFC 4122 uuid), so the test does not depend on which optional
# format packages jsonschema finds installed.
FORMATS = jsonschema.FormatChecker(formats=())
TIME_RE = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")


@FORMATS.checks("date", raises=ValueError)
def _date(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", s):
        return False
    datetime.date.fromisoformat(s)  # raises on 2023-02-31
    return True


@FORMATS.checks("time")
def _time(s):
    return not isinstance(s, str) or bool(TIME_RE.match(s))


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(s):
    if not isinstance(s, str):
        return True
    d, sep, t = s.partition("T")
    return bool(sep) and _date(d) and _time(t)


@FORMATS.checks("uuid", raises=ValueError)
def _uuid(s):
    if not isinstance(s, str):
        return True
    uuid.UUID(s)
    return bool(re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", s))

def main(path):
    n = bad = cut = 0
    schemas = {}
    per = {}
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        sp = r["schema"]
        if sp not in schemas:
            s = json.load(open(sp, encoding="utf-8"))
            if s == {"type": "json_object"}:
                s = {"type": "object"}   # OpenAI's response_format: any JSON object
            schemas[sp] = s
        st = per.setdefault(sp, [0, 0, 0])
        st[0] += 1
        if not r["ended"]:
            cut += 1
            st[2] += 1
            continue
        n += 1
        try:
            v = json.loads(r["text"])
            jsonschema.validate(v, schemas[sp], format_checker=FORMATS)
        except Exception as e:  # noqa: BLE001 - report any failure
            bad += 1
            st[1] += 1
            if bad <= 10:
                print(f"INVALID {sp}: {r['text']!r}: {str(e).splitlines()[0]}")
    for sp, (tot, b, c) in sorted(per.items()):
        if b or c:
            print(f"{sp}: {tot} samples, {b} invalid, {c} cut by the token limit")
    print(f"validate: {n} complete outputs, {bad} invalid, {cut} cut by the token limit, {len(schemas)} schemas")
    return 1 if bad or n == 0 else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
