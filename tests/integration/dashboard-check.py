#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the Grafana dashboard (standard library only).

  dashboard-check.py DASHBOARD.json [METRICS.txt]

Always: the file is valid JSON, declares the Prometheus data source as the
input DS_PROMETHEUS, every panel and target uses ${DS_PROMETHEUS}, and every
panel has at least one query. With METRICS.txt (a live /metrics exposition of
ckptd): every ckpt_* metric name a query references exists there (a
histogram's _bucket/_sum/_count count as the histogram).
Exit 0 when all holds, 1 otherwise.
"""
import json
import re
import sys

NAME = re.compile(r"\bckpt_[a-z0-9_]+\b")


def panels(doc):
    for p in doc.get("panels", []):
        yield p
        for q in p.get("panels", []):  # collapsed rows
            yield q


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 1
    errors = []
    with open(argv[1], encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            print("%s: not valid JSON: %s" % (argv[1], e), file=sys.stderr)
            return 1
    inputs = [i for i in doc.get("__inputs", []) if i.get("name") == "DS_PROMETHEUS"]
    if not inputs or inputs[0].get("pluginId") != "prometheus":
        errors.append("no __inputs entry DS_PROMETHEUS of type prometheus")
    referenced = set()
    n = 0
    for p in panels(doc):
        if p.get("type") == "row":
            continue
        n += 1
        title = p.get("title", "?")
        ds = json.dumps(p.get("datasource"))
        if "${DS_PROMETHEUS}" not in ds:
            errors.append("panel %r: datasource is not ${DS_PROMETHEUS}" % title)
        targets = p.get("targets", [])
        if not targets:
            errors.append("panel %r has no query" % title)
        for t in targets:
            if "${DS_PROMETHEUS}" not in json.dumps(t.get("datasource", "${DS_PROMETHEUS}")):
                errors.append("panel %r: a target's datasource is not ${DS_PROMETHEUS}" % title)
            # Label matchers and grouping clauses name labels, not metrics.
            expr = re.sub(r"\{[^}]*\}", "", t.get("expr", ""))
            expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
            referenced.update(NAME.findall(expr))
    if n == 0:
        errors.append("no panels")
    if len(argv) == 3:
        with open(argv[2], encoding="utf-8") as f:
            text = f.read()
        types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
        for name in sorted(referenced):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name in types or (base in types and types[base] == "histogram"):
                continue
            errors.append("query metric %s is not in ckptd's /metrics" % name)
    for e in errors:
        print("%s: %s" % (argv[1], e), file=sys.stderr)
    if not errors:
        print("%s: %d panels, %d metric names%s" % (
            argv[1], n, len(referenced), ", all exposed by ckptd" if len(argv) == 3 else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
