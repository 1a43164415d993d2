#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A webhook receiver for the tests (standard library only).

  webhook-receiver.py PORT_FILE OUT_FILE [--fail-first N]

Listens on a free loopback port (written to PORT_FILE once listening) and
appends one JSON line per POST to OUT_FILE: {"path", "status", "body"} where
body is the parsed JSON (or the raw text if it does not parse). The first N
POSTs are answered 503 (to exercise retries), the rest 200.
"""
import http.server
import json
import os
import sys
import threading


def main(argv):
    port_file, out_file = argv[1], argv[2]
    fail_first = int(argv[4]) if len(argv) > 4 and argv[3] == "--fail-first" else 0
    lock = threading.Lock()
    seen = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n).decode("utf-8", "replace")
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
            with lock:
                seen[0] += 1
                status = 503 if seen[0] <= fail_first else 200
                with open(out_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"path": self.path, "status": status,
                                        "content_type": self.headers.get("Content-Type"),
                                        "body": body}) + "\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, fmt, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, port_file)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
