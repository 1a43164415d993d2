#!/usr/bin/env python3
"""Small helpers for the S3 test-server harness (standard library only).

  s3util.py freeport [N]            print N free loopback TCP ports, one a line
  s3util.py wait-http URL SECONDS   poll URL until any HTTP answer (exit 1 on timeout)
  s3util.py request METHOD URL [BODY-FILE]
                                    send one SigV4-signed request with the
                                    credentials in AWS_ACCESS_KEY_ID /
                                    AWS_SECRET_ACCESS_KEY / AWS_REGION; print the
                                    status line and the body; exit 0 on 2xx

The harness uses this instead of an S3 client so that bringing a server up
needs nothing but python3, and a bucket exists before any client under test
runs. Secrets are never printed.
"""
import datetime
import hashlib
import hmac
import http.client
import os
import socket
import sys
import time
import urllib.parse


def freeport(count):
    # Hold every socket open until all are chosen so that one call never
    # returns the same port twice. Another process can still take a port
    # between here and its use: callers that bind later retry on failure.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        for s in socks:
            print(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return 0


def wait_http(url, seconds):
    parts = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + float(seconds)
    last = "no attempt"
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)
        try:
            conn.request("GET", parts.path or "/")
            resp = conn.getresponse()
            resp.read()
            # Any HTTP answer (even 403) means the frontend is serving.
            return 0
        except (OSError, http.client.HTTPException) as e:
            last = repr(e)
        finally:
            conn.close()
        time.sleep(0.2)
    print("wait-http: %s not answering after %s s (last error: %s)" % (url, seconds, last),
          file=sys.stderr)
    return 1


def _sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signed_request(method, url, body=b""):
    access = os.environ["AWS_ACCESS_KEY_ID"]
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    region = os.environ.get("AWS_REGION") or "us-east-1"
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = now.strftime("%Y%m%d")
    payload_hash = hashlib.sha256(body).hexdigest()
    path = urllib.parse.quote(urllib.parse.unquote(parts.path or "/"), safe="/~")
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    canon_query = "&".join(
        "%s=%s" % (urllib.parse.quote(k, safe="~"), urllib.parse.quote(v, safe="~"))
        for k, v in sorted(query))
    headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canon = "\n".join([method, path, canon_query,
                       "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers)),
                       signed, payload_hash])
    scope = "%s/%s/s3/aws4_request" % (day, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canon.encode()).hexdigest()])
    k = _sign(("AWS4" + secret).encode(), day)
    k = _sign(k, region)
    k = _sign(k, "s3")
    k = _sign(k, "aws4_request")
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s"
                                % (access, scope, signed, sig))
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=60)
    try:
        target = path + ("?" + canon_query if canon_query else "")
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, resp.reason, data
    finally:
        conn.close()


def main(argv):
    if len(argv) >= 2 and argv[1] == "freeport":
        return freeport(int(argv[2]) if len(argv) > 2 else 1)
    if len(argv) == 4 and argv[1] == "wait-http":
        return wait_http(argv[2], argv[3])
    if len(argv) in (4, 5) and argv[1] == "request":
        body = b""
        if len(argv) == 5:
            with open(argv[4], "rb") as f:
                body = f.read()
        status, reason, data = signed_request(argv[2], argv[3], body)
        print("%d %s" % (status, reason))
        sys.stdout.write(data.decode("utf-8", "replace"))
        return 0 if 200 <= status < 300 else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
