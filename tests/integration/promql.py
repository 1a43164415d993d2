#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Small clients for the integration tests (standard library only).

  promql.py query BASE_URL EXPR        instant query against Prometheus's HTTP
                                       API; prints one "value" line per result
                                       series (empty output: no series)
  promql.py target-health BASE_URL JOB health of the scrape targets of JOB
  promql.py get URL                    body of a GET (exit 1 unless 200)

Exit status 2 when the server cannot be reached or answers an error.
"""
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read()


def api(base, path, **params):
    url = base.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    status, body = fetch(url)
    doc = json.loads(body)
    if status != 200 or doc.get("status") != "success":
        raise RuntimeError("%s: %s" % (url, doc.get("error", status)))
    return doc["data"]


def main(argv):
    try:
        if argv[1] == "query":
            data = api(argv[2], "/api/v1/query", query=argv[3])
            if data["resultType"] == "vector":
                for r in data["result"]:
                    print(r["value"][1])
            elif data["resultType"] == "scalar":
                print(data["result"][1])
            return 0
        if argv[1] == "target-health":
            data = api(argv[2], "/api/v1/targets")
            for t in data["activeTargets"]:
                if t["labels"].get("job") == argv[3]:
                    print(t["health"])
            return 0
        if argv[1] == "get":
            status, body = fetch(argv[2])
            sys.stdout.write(body.decode("utf-8", "replace"))
            return 0 if status == 200 else 1
    except (OSError, ValueError, RuntimeError, urllib.error.URLError) as e:
        print("promql.py: %s" % e, file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
