#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 reverse proxy for S3 tests (standard library only).

Put it between a client and an S3 server: the client is pointed at the
proxy's loopback port, and every request is forwarded byte for byte (Host
header and all) to the upstream server, so SigV4 signatures stay valid (the
client signs the Host it connects to, i.e. the proxy's address; radosgw and
moto serve path-style requests whatever the Host). Bodies are streamed in
both directions (Content-Length, chunked, or until close), never buffered
whole; keep-alive connections stay open; `Expect: 100-continue` works.

Faults follow rules. A rule is a set of key=value pairs:

  kind=K        what to do (below)
  method=M      only requests with this method (GET, PUT, POST, ...)
  match=S       only requests whose target (path?query) contains S,
                e.g. match=partNumber= or match=?uploads
  every=N       inject on every Nth matching request (N, 2N, ...)
  p=X           inject with probability X (default 1 unless every= is set)
  after=N       leave the first N matching requests alone
  limit=N       inject at most N times
  seconds=X     for kind=stall (default 5)
  rate=B        for kind=slow: bytes per second (default 65536)
  status=N      for kind=error (default 500)
  name=S        label in the statistics (default: the kind, error_<status>)

Kinds:
  reset_before_body  the request head arrived: reset the client connection
                     (TCP RST); nothing reaches the server
  reset_after_body   forward the whole request (the server acts on it), then
                     reset the client connection instead of answering
  error              answer status= with an S3 error XML body; nothing
                     reaches the server (aliases: 500, 503, 429)
  slowdown           answer 503 with <Code>SlowDown</Code>
  stall              forward, then hold the answer back seconds= seconds
  slow               forward, throttling request and response bodies to rate=
  drop_response      forward, then send only part of the answer (headers and
                     half the body, or half the headers when there is no
                     body) and close the connection

The first rule that matches a request and fires decides its fault; one
request gets at most one fault. Rules come from --fault flags, from a JSON
control file re-read whenever it changes ({"rules": [{...}, ...]}), or from
the control endpoint served by the proxy itself (S3 bucket names cannot
contain '_', so these paths never collide with S3 requests):

  GET  /__faultproxy/stats   JSON: requests seen, faults injected per name,
                             and each rule with its counters
  PUT  /__faultproxy/rules   replace the rules (JSON list or {"rules": [...]})
  POST /__faultproxy/reset   zero every counter

The statistics are also written to --stats-file after every change.

Usage:
  faultproxy.py --upstream http://127.0.0.1:PORT [--port N] [--port-file F]
                [--stats-file F] [--control-file F] [--seed N]
                [--fault 'kind=slowdown,method=PUT,match=partNumber=,every=3'] ...
"""
import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse

IO_CHUNK = 256 * 1024
MAX_HEAD = 64 * 1024
CONTROL_PREFIX = b"/__faultproxy/"

KINDS = {"reset_before_body", "reset_after_body", "error", "slowdown", "stall", "slow",
         "drop_response"}
ALIASES = {"500": ("error", 500), "503": ("error", 503), "429": ("error", 429)}
ERROR_CODES = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests",
               502: "BadGateway", 504: "GatewayTimeout"}
REASONS = {500: "Internal Server Error", 503: "Service Unavailable", 429: "Too Many Requests",
           502: "Bad Gateway", 504: "Gateway Timeout"}


class Closed(Exception):
    """A peer closed its connection (or it was reset)."""


class Rule:
    def __init__(self, spec):
        spec = dict(spec)
        kind = str(spec.pop("kind", ""))
        self.status = None
        if kind in ALIASES:
            kind, self.status = ALIASES[kind]
        if kind not in KINDS:
            raise ValueError("unknown fault kind %r (one of %s)" %
                             (kind, ", ".join(sorted(KINDS | set(ALIASES)))))
        self.kind = kind
        self.method = spec.pop("method", None)
        if self.method is not None:
            self.method = str(self.method).upper()
        self.match = spec.pop("match", None)
        self.every = int(spec.pop("every", 0))
        self.p = float(spec.pop("p", 1.0))
        self.after = int(spec.pop("after", 0))
        self.limit = int(spec.pop("limit", -1))
        self.seconds = float(spec.pop("seconds", 5))
        self.rate = max(1, int(spec.pop("rate", 65536)))
        if "status" in spec:
            self.status = int(spec.pop("status"))
        if self.kind == "error" and self.status is None:
            self.status = 500
        if self.kind == "slowdown":
            self.status = 503
        default_name = "error_%d" % self.status if self.kind == "error" else self.kind
        self.name = str(spec.pop("name", default_name))
        if spec:
            raise ValueError("unknown rule keys: %s" % ", ".join(sorted(spec)))
        self.seen = 0
        self.chosen = 0
        self.injected = 0

    @staticmethod
    def parse(text):
        spec = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep:
                # A bare word is the kind.
                key, value = "kind", key
            spec[key.strip()] = value
        return Rule(spec)

    def fires(self, method, target, rng):
        if self.method is not None and method != self.method:
            return False
        if self.match is not None and self.match not in target:
            return False
        self.seen += 1
        if self.seen <= self.after:
            return False
        # limit= counts faults chosen, not yet injected: with concurrent
        # connections several may be under way at once.
        if 0 <= self.limit <= self.chosen:
            return False
        if self.every > 0 and (self.seen - self.after) % self.every != 0:
            return False
        if self.p < 1.0 and rng.random() >= self.p:
            return False
        self.chosen += 1
        return True

    def describe(self):
        d = {"name": self.name, "kind": self.kind, "seen": self.seen, "injected": self.injected}
        for key in ("method", "match", "status"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        for key, default in (("every", 0), ("p", 1.0), ("after", 0), ("limit", -1)):
            if getattr(self, key) != default:
                d[key] = getattr(self, key)
        if self.kind == "stall":
            d["seconds"] = self.seconds
        if self.kind == "slow":
            d["rate"] = self.rate
        return d


class State:
    """Rules and counters, shared by every connection thread."""

    def __init__(self, rules, seed, stats_file, control_file):
        self.lock = threading.Lock()
        self.rules = rules
        self.cli_rules = list(rules)
        self.rng = random.Random(seed)
        self.stats_file = stats_file
        self.control_file = control_file
        self.control_mtime = None
        self.requests = 0
        self.faults = {}
        self.connections = 0
        self.write_stats()

    def reload_control_file(self):
        # Called with the lock held.
        if not self.control_file:
            return
        try:
            mtime = os.stat(self.control_file).st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self.control_mtime:
            return
        self.control_mtime = mtime
        if mtime is None:
            self.rules = list(self.cli_rules)
            return
        try:
            with open(self.control_file, encoding="utf-8") as f:
                self.rules = self.cli_rules + parse_rules(json.load(f))
        except (OSError, ValueError) as e:
            print("faultproxy: ignoring control file: %s" % e, file=sys.stderr, flush=True)

    def decide(self, method, target):
        with self.lock:
            self.reload_control_file()
            self.requests += 1
            chosen = None
            for rule in self.rules:
                if rule.fires(method, target, self.rng):
                    chosen = rule
                    break
            self.write_stats_locked()
            return chosen

    def record(self, rule):
        """Count a fault once it has really been injected."""
        with self.lock:
            rule.injected += 1
            self.faults[rule.name] = self.faults.get(rule.name, 0) + 1
            self.write_stats_locked()

    def set_rules(self, rules):
        with self.lock:
            self.cli_rules = rules
            self.rules = list(rules)
            self.control_mtime = None
            self.write_stats_locked()

    def reset(self):
        with self.lock:
            self.requests = 0
            self.faults = {}
            for rule in self.rules:
                rule.seen = rule.chosen = rule.injected = 0
            self.write_stats_locked()

    def snapshot(self):
        with self.lock:
            return self.snapshot_locked()

    def snapshot_locked(self):
        return {"requests": self.requests, "connections": self.connections,
                "faults": dict(self.faults), "rules": [r.describe() for r in self.rules]}

    def write_stats(self):
        with self.lock:
            self.write_stats_locked()

    def write_stats_locked(self):
        if not self.stats_file:
            return
        tmp = self.stats_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.snapshot_locked(), f, indent=1, sort_keys=True)
        os.replace(tmp, self.stats_file)


def parse_rules(doc):
    if isinstance(doc, dict):
        doc = doc.get("rules", [])
    if not isinstance(doc, list):
        raise ValueError("rules must be a JSON list of objects")
    return [Rule(r) if isinstance(r, dict) else Rule.parse(str(r)) for r in doc]


class Stream:
    """A buffered reader over a socket that can hand over raw bytes."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        try:
            data = self.sock.recv(IO_CHUNK)
        except OSError as e:
            raise Closed(str(e))
        if not data:
            raise Closed("eof")
        self.buf += data

    def read_head(self, allow_eof_at_start=False):
        """Read up to and including the blank line; None on a clean EOF before any byte."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head, self.buf = self.buf[:end + 4], self.buf[end + 4:]
                return head
            if len(self.buf) > MAX_HEAD:
                raise Closed("header block too large")
            try:
                self.fill()
            except Closed:
                if allow_eof_at_start and not self.buf:
                    return None
                raise

    def read_line(self):
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                line, self.buf = self.buf[:end + 2], self.buf[end + 2:]
                return line
            if len(self.buf) > MAX_HEAD:
                raise Closed("line too long")
            self.fill()

    def read_some(self, limit):
        if not self.buf:
            self.fill()
        data, self.buf = self.buf[:limit], self.buf[limit:]
        return data


def parse_head(head):
    lines = head.split(b"\r\n")
    first = lines[0].decode("latin-1")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        key, _, value = line.partition(b":")
        headers.setdefault(key.strip().lower().decode("latin-1"), []).append(
            value.strip().decode("latin-1"))
    return first, headers


def header(headers, name):
    values = headers.get(name)
    return values[-1] if values else None


def body_framing(headers):
    """('chunked', None), ('length', N) or ('none', 0)."""
    te = header(headers, "transfer-encoding")
    if te and "chunked" in te.lower():
        return "chunked", None
    cl = header(headers, "content-length")
    if cl is not None:
        return "length", int(cl)
    return "none", 0


class Throttle:
    def __init__(self, rate):
        self.rate = rate
        self.start = time.monotonic()
        self.sent = 0

    def chunk(self):
        return max(1, min(IO_CHUNK, self.rate // 10))

    def account(self, n):
        self.sent += n
        ahead = self.sent / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)


def send_all(sock, data, throttle=None):
    if not data:
        return
    try:
        if throttle is None:
            sock.sendall(data)
            return
        view = memoryview(data)
        while view:
            n = throttle.chunk()
            sock.sendall(view[:n])
            throttle.account(min(n, len(view)))
            view = view[n:]
    except OSError as e:
        raise Closed(str(e))


def copy_body(src, dst, framing, length, throttle=None, budget=None):
    """Stream one message body from Stream src to socket dst.

    budget: stop after that many bytes (for drop_response) and return False.
    Returns True when the whole body was copied.
    """
    def emit(data):
        nonlocal budget
        if budget is not None:
            if len(data) >= budget:
                send_all(dst, data[:budget], throttle)
                budget = 0
                return False
            budget -= len(data)
        send_all(dst, data, throttle)
        return True

    limit = throttle.chunk() if throttle else IO_CHUNK
    if framing == "length":
        left = length
        while left > 0:
            data = src.read_some(min(left, limit))
            left -= len(data)
            if not emit(data):
                return False
        return True
    if framing == "chunked":
        while True:
            line = src.read_line()
            if not emit(line):
                return False
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                # Trailers, then the final blank line.
                while True:
                    line = src.read_line()
                    if not emit(line):
                        return False
                    if line == b"\r\n":
                        return True
            left = size + 2  # the chunk and its CRLF
            while left > 0:
                data = src.read_some(min(left, limit))
                left -= len(data)
                if not emit(data):
                    return False
    if framing == "eof":
        while True:
            try:
                data = src.read_some(limit)
            except Closed:
                return True
            if not emit(data):
                return False
    return True


def reset(sock):
    """Close with a TCP RST rather than a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # Wakes a thread blocked in recv() on it without sending anything;
        # only then does the close below release the socket (and send RST).
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def error_response(status, code, keep_alive, target):
    resource = urllib.parse.urlsplit(target).path
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>Injected by the fault proxy</Message><Resource>%s</Resource>'
            '<RequestId>faultproxy</RequestId></Error>' % (code, resource)).encode()
    head = ("HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
            "x-amz-request-id: faultproxy\r\n%s\r\n"
            % (status, REASONS.get(status, "Error"), len(body),
               "" if keep_alive else "Connection: close\r\n")).encode()
    return head + body


class Connection:
    """One client connection and its upstream connection.

    This thread reads requests from the client and forwards them; a second
    thread reads the upstream's answers and relays them. A queue of pending
    requests (with the fault chosen for each) pairs the two in order.
    """

    def __init__(self, client, upstream_addr, state):
        self.client = client
        self.upstream_addr = upstream_addr
        self.state = state
        self.upstream = None
        self.pending = []
        self.cond = threading.Condition()
        self.closed = False
        self.client_lock = threading.Lock()

    def close(self, rst=False):
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            if rst and sock is self.client:
                reset(sock)
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                sock.close()
            except OSError:
                pass

    def push(self, item):
        with self.cond:
            self.pending.append(item)
            self.cond.notify_all()

    def run(self):
        threading.Thread(target=self.relay_responses, daemon=True).start()
        try:
            self.serve_requests()
        except Closed:
            pass
        except Exception as e:  # a bug here must not kill the whole proxy
            print("faultproxy: connection error: %r" % e, file=sys.stderr, flush=True)
        finally:
            with self.cond:
                self.pending.append(None)
                self.cond.notify_all()

    def upstream_gone(self):
        """The idle upstream connection was closed by the server (keep-alive timeout)."""
        if self.upstream_reader.buf:
            return False
        try:
            self.upstream.setblocking(False)
            try:
                return self.upstream.recv(1, socket.MSG_PEEK) == b""
            finally:
                self.upstream.setblocking(True)
        except BlockingIOError:
            return False
        except OSError:
            return True

    def connect_upstream(self):
        # Requests are not pipelined, so when a new one starts no answer is
        # outstanding and a dead idle upstream connection can be replaced.
        if self.upstream is not None and self.upstream_gone():
            try:
                self.upstream.close()
            except OSError:
                pass
            self.upstream = None
        if self.upstream is None:
            try:
                self.upstream = socket.create_connection(self.upstream_addr, timeout=None)
            except OSError as e:
                send_all(self.client, error_response(502, "BadGateway", False, "/"))
                raise Closed("upstream: %s" % e)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.upstream_reader = Stream(self.upstream)

    def serve_requests(self):
        reader = Stream(self.client)
        while True:
            head = reader.read_head(allow_eof_at_start=True)
            if head is None:
                return
            first, headers = parse_head(head)
            parts = first.split(" ")
            if len(parts) != 3:
                raise Closed("bad request line")
            method, target = parts[0], parts[1]
            framing, length = body_framing(headers)
            expect_continue = (header(headers, "expect") or "").lower() == "100-continue"

            if target.encode("latin-1").startswith(CONTROL_PREFIX):
                body = b""
                if framing == "length" and length:
                    while len(reader.buf) < length:
                        reader.fill()
                    body, reader.buf = reader.buf[:length], reader.buf[length:]
                self.push(("synthetic", self.control(method, target, body), False))
                continue

            rule = self.state.decide(method, target)
            kind = rule.kind if rule else None

            if kind == "reset_before_body":
                self.state.record(rule)
                self.close(rst=True)
                raise Closed("injected reset")

            if kind in ("error", "slowdown"):
                code = "SlowDown" if kind == "slowdown" else ERROR_CODES.get(rule.status, "InternalError")
                if expect_continue:
                    # The client waits for 100 Continue before its body:
                    # answer now and close, as a server refusing the body may.
                    self.state.record(rule)
                    self.push(("synthetic", error_response(rule.status, code, False, target), True))
                    return
                # Read the body away so that the connection stays usable.
                drain_body(reader, framing, length)
                self.state.record(rule)
                self.push(("synthetic", error_response(rule.status, code, True, target), False))
                continue

            self.connect_upstream()
            throttle = Throttle(rule.rate) if kind == "slow" else None
            self.push(("forward", method, target, rule))
            send_all(self.upstream, head)
            if framing in ("length", "chunked"):
                copy_body(reader, self.upstream, framing, length, throttle)

    def control(self, method, target, body):
        path = urllib.parse.urlsplit(target).path
        status, doc = 200, None
        try:
            if path == "/__faultproxy/stats" and method == "GET":
                doc = self.state.snapshot()
            elif path == "/__faultproxy/rules" and method in ("PUT", "POST"):
                self.state.set_rules(parse_rules(json.loads(body.decode() or "[]")))
                doc = self.state.snapshot()
            elif path == "/__faultproxy/reset" and method == "POST":
                self.state.reset()
                doc = self.state.snapshot()
            else:
                status, doc = 404, {"error": "unknown control request %s %s" % (method, path)}
        except ValueError as e:
            status, doc = 400, {"error": str(e)}
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        return (("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (status, "OK" if status == 200 else "Error", len(data))).encode() + data)

    def next_item(self):
        with self.cond:
            while not self.pending and not self.closed:
                self.cond.wait()
            if not self.pending:
                return None
            return self.pending.pop(0)

    def relay_responses(self):
        """Second thread: relay the upstream's answers (and injected ones) in order."""
        try:
            while True:
                item = self.next_item()
                if item is None:
                    break
                if item[0] == "synthetic":
                    send_all(self.client, item[1])
                    if item[2]:
                        break
                    continue
                _, method, target, rule = item
                if not self.relay_one(method, rule):
                    break
        except Closed:
            pass
        except Exception as e:
            print("faultproxy: relay error: %r" % e, file=sys.stderr, flush=True)
        self.close()

    def relay_one(self, method, rule):
        """Relay one final answer (and any 1xx before it). False: close the connection."""
        kind = rule.kind if rule else None
        up = self.upstream_reader
        while True:
            head = up.read_head()
            first, headers = parse_head(head)
            status = int(first.split(" ", 2)[1])
            if 100 <= status < 200 and status != 101:
                send_all(self.client, head)
                continue
            break

        if kind == "reset_after_body":
            self.state.record(rule)
            self.close(rst=True)
            return False
        if kind == "stall":
            self.state.record(rule)
            time.sleep(rule.seconds)

        framing, length = body_framing(headers)
        if method == "HEAD" or status in (204, 304):
            framing, length = "none", 0
        elif framing == "none":
            framing = "eof"
        conn_hdr = (header(headers, "connection") or "").lower()
        close_after = framing == "eof" or conn_hdr == "close"

        if kind == "drop_response":
            # Counted first: the client may ask for the statistics as soon
            # as it sees the connection drop.
            self.state.record(rule)
            if framing == "length" and length > 0:
                send_all(self.client, head)
                copy_body(up, self.client, framing, length, budget=length // 2)
            elif framing in ("chunked", "eof"):
                send_all(self.client, head)
                copy_body(up, self.client, framing, length, budget=1)
            else:
                send_all(self.client, head[:len(head) // 2])
            self.close()
            return False

        throttle = None
        if kind == "slow":
            self.state.record(rule)
            throttle = Throttle(rule.rate)
        send_all(self.client, head, throttle)
        if framing != "none":
            copy_body(up, self.client, framing, length, throttle)
        return not close_after


def drain_body(reader, framing, length):
    if framing == "length":
        left = length
        while left > 0:
            left -= len(reader.read_some(min(left, IO_CHUNK)))
    elif framing == "chunked":
        while True:
            size = int(reader.read_line().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while reader.read_line() != b"\r\n":
                    pass
                return
            left = size + 2
            while left > 0:
                left -= len(reader.read_some(min(left, IO_CHUNK)))


def parse_upstream(text):
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme != "http":
        raise ValueError("only http:// upstreams are supported")
    return parts.hostname, parts.port or 80


def main(argv=None):
    ap = argparse.ArgumentParser(description="Fault-injecting HTTP/1.1 reverse proxy for S3 tests.")
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT of the S3 server")
    ap.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    ap.add_argument("--port-file", help="write the listening port here once ready")
    ap.add_argument("--stats-file", help="keep the JSON statistics here")
    ap.add_argument("--control-file", help="JSON rules file, re-read whenever it changes")
    ap.add_argument("--fault", action="append", default=[], metavar="SPEC",
                    help="a rule, e.g. 'kind=503,method=PUT,match=partNumber=,every=2'")
    ap.add_argument("--seed", type=int, default=None, help="seed for p= rules")
    args = ap.parse_args(argv)

    try:
        upstream = parse_upstream(args.upstream)
        rules = [Rule.parse(spec) for spec in args.fault]
    except ValueError as e:
        ap.error(str(e))
    state = State(rules, args.seed, args.stats_file, args.control_file)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(128)
    port = listener.getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    print("faultproxy: listening on %s:%d, upstream %s:%d" % (args.host, port, *upstream),
          flush=True)

    try:
        while True:
            client, _ = listener.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with state.lock:
                state.connections += 1
            conn = Connection(client, upstream, state)
            threading.Thread(target=conn.run, daemon=True).start()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
