#!/usr/bin/env python3
"""Self-test of faultproxy.py: boto3 -> faultproxy -> moto (SigV4 on).

Each fault kind is injected and observed twice: as the client sees it (with
the client's retries off) and in the proxy's counters. Then a multipart
upload and a download with several faults at once, and the client's own
retries, must still end byte-identical. Exit 0 pass, 1 fail, 77 skip.
"""
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1024 * 1024

try:
    import boto3
    import botocore.config
    import botocore.exceptions
    from boto3.s3.transfer import TransferConfig
    import moto.server  # noqa: F401  (moto.sh needs it)
except ImportError as e:
    # Debian 12 has no moto package: only a python that ships it can run this.
    print("SKIP: this python3 lacks boto3 or moto (%s)" % e)
    sys.exit(77)

failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what), flush=True)
    if not cond:
        failures.append(what)


class Proxy:
    def __init__(self, tmp, upstream):
        self.port_file = os.path.join(tmp, "proxy.port")
        self.stats_file = os.path.join(tmp, "proxy.stats")
        self.control_file = os.path.join(tmp, "proxy.rules")
        self.log = open(os.path.join(tmp, "proxy.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "faultproxy.py"), "--upstream", upstream,
             "--port-file", self.port_file, "--stats-file", self.stats_file,
             "--control-file", self.control_file, "--seed", "1",
             "--fault", "kind=429,match=cli-rule-probe"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("faultproxy did not start")
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.port = int(f.read())
        self.url = "http://127.0.0.1:%d" % self.port

    def control(self, method, path, doc=None):
        data = None if doc is None else json.dumps(doc).encode()
        req = urllib.request.Request(self.url + "/__faultproxy/" + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.load(resp)

    def rules(self, rules):
        self.control("PUT", "rules", rules)
        self.control("POST", "reset")

    def faults(self):
        return self.control("GET", "stats")["faults"]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def client(endpoint, env, retries, read_timeout=60):
    cfg = botocore.config.Config(
        retries={"mode": "standard", "total_max_attempts": retries},
        read_timeout=read_timeout, connect_timeout=10,
        s3={"addressing_style": "path"})
    return boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], config=cfg)


def expect_error(fn, what):
    """Run fn; return the exception it raised (None if it succeeded)."""
    try:
        fn()
    except Exception as e:  # the kind of error is what each check looks at
        print("    %s raised %s: %s" % (what, type(e).__name__, str(e)[:160]))
        return e
    return None


def error_code(e):
    if isinstance(e, botocore.exceptions.ClientError):
        return (e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
                e.response.get("Error", {}).get("Code"))
    return None, None


def single_fault_checks(proxy, env):
    bucket = env["S3_BUCKET"]
    s3 = client(proxy.url, env, retries=1)
    small = os.urandom(64 * 1024)
    s3.put_object(Bucket=bucket, Key="plain", Body=small)
    body = s3.get_object(Bucket=bucket, Key="plain")["Body"].read()
    check(body == small, "no fault: put/get through the proxy")

    # A rule given on the command line applies too.
    e = expect_error(lambda: s3.get_object(Bucket=bucket, Key="cli-rule-probe"), "GET")
    check(error_code(e) == (429, "TooManyRequests"), "--fault rule from the command line: 429")

    for status, code in ((500, "InternalError"), (503, "ServiceUnavailable"),
                         (429, "TooManyRequests")):
        proxy.rules([{"kind": str(status), "method": "GET", "match": "plain"}])
        e = expect_error(lambda: s3.get_object(Bucket=bucket, Key="plain"), "GET")
        check(error_code(e) == (status, code), "error %d seen by the client as %s" % (status, code))
        check(proxy.faults() == {"error_%d" % status: 1}, "error %d counted once" % status)

    # A status fault on a PUT with a body (Expect: 100-continue) and then the
    # same connection still working.
    proxy.rules([{"kind": "slowdown", "method": "PUT", "limit": 1}])
    e = expect_error(lambda: s3.put_object(Bucket=bucket, Key="sd", Body=small), "PUT")
    check(error_code(e) == (503, "SlowDown"), "slowdown: 503 with <Code>SlowDown</Code>")
    s3.put_object(Bucket=bucket, Key="sd", Body=small)
    check(proxy.faults() == {"slowdown": 1}, "slowdown counted once, limit=1 respected")

    proxy.rules([{"kind": "reset_before_body", "method": "PUT"}])
    e = expect_error(lambda: s3.put_object(Bucket=bucket, Key="rbb", Body=small), "PUT")
    check(isinstance(e, botocore.exceptions.HTTPClientError) or
          isinstance(e, botocore.exceptions.ConnectionError),
          "reset_before_body: the client sees a connection error")
    proxy.rules([])
    e = expect_error(lambda: s3.head_object(Bucket=bucket, Key="rbb"), "HEAD")
    check(error_code(e)[0] == 404, "reset_before_body: nothing reached the server")

    proxy.rules([{"kind": "reset_after_body", "method": "PUT", "match": "rab"}])
    e = expect_error(lambda: s3.put_object(Bucket=bucket, Key="rab", Body=small), "PUT")
    check(isinstance(e, (botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError)),
          "reset_after_body: the client sees a connection error")
    check(proxy.faults() == {"reset_after_body": 1}, "reset_after_body counted")
    got = s3.get_object(Bucket=bucket, Key="rab")["Body"].read()
    check(got == small, "reset_after_body: the server did store the object")

    big = os.urandom(2 * MiB)
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    proxy.rules([{"kind": "drop_response", "method": "GET", "match": "big"}])

    def read_big():
        return s3.get_object(Bucket=bucket, Key="big")["Body"].read()
    e = expect_error(read_big, "GET")
    check(e is not None, "drop_response: the client sees a truncated answer")
    check(proxy.faults() == {"drop_response": 1}, "drop_response counted")

    proxy.rules([{"kind": "stall", "seconds": 2, "method": "GET", "match": "plain"}])
    t0 = time.monotonic()
    body = s3.get_object(Bucket=bucket, Key="plain")["Body"].read()
    waited = time.monotonic() - t0
    check(body == small and waited >= 1.9, "stall: answer intact, held back %.1f s (>= 2)" % waited)
    quick = client(proxy.url, env, retries=1, read_timeout=0.5)
    e = expect_error(lambda: quick.get_object(Bucket=bucket, Key="plain"), "GET")
    check(isinstance(e, botocore.exceptions.ReadTimeoutError), "stall: a short read timeout fires")
    check(proxy.faults().get("stall", 0) >= 1, "stall counted")

    proxy.rules([{"kind": "slow", "rate": 400000, "method": "GET", "match": "big"}])
    t0 = time.monotonic()
    body = read_big()
    waited = time.monotonic() - t0
    check(body == big and waited >= 4.5,
          "slow: 2 MiB at 400 kB/s intact, took %.1f s (>= 5)" % waited)
    check(proxy.faults() == {"slow": 1}, "slow counted")

    # every=N and match= select exactly the intended requests.
    proxy.rules([{"kind": "500", "method": "GET", "match": "plain", "every": 2}])
    results = [expect_error(lambda: s3.get_object(Bucket=bucket, Key="plain"), "GET") for _ in range(4)]
    s3.get_object(Bucket=bucket, Key="big")  # not matched
    check([r is None for r in results] == [True, False, True, False],
          "every=2: requests 2 and 4 fail, 1 and 3 pass")
    stats = proxy.control("GET", "stats")
    check(stats["faults"] == {"error_500": 2} and stats["rules"][0]["seen"] == 4,
          "every=2: counted 2 of 4 matching requests")

    # Rules from the control file, re-read when it changes.
    proxy.rules([])
    with open(proxy.control_file + ".tmp", "w") as f:
        json.dump({"rules": [{"kind": "503", "match": "plain", "limit": 1}]}, f)
    os.replace(proxy.control_file + ".tmp", proxy.control_file)
    e = expect_error(lambda: s3.get_object(Bucket=bucket, Key="plain"), "GET")
    check(error_code(e) == (503, "ServiceUnavailable"), "control file rule applied")
    os.unlink(proxy.control_file)
    s3.get_object(Bucket=bucket, Key="plain")
    with open(proxy.stats_file) as f:
        check(json.load(f)["faults"].get("error_503") == 1, "stats file shows the injected fault")


def retried_transfer(proxy, env, tmp):
    """Several faults at once; the client's retries must still get every byte right."""
    bucket = env["S3_BUCKET"]
    s3 = client(proxy.url, env, retries=10)
    src = os.path.join(tmp, "src")
    with open(src, "wb") as f:
        for _ in range(24):
            f.write(os.urandom(MiB))
    proxy.rules([
        {"kind": "reset_before_body", "method": "PUT", "match": "partNumber=", "limit": 1},
        {"kind": "reset_after_body", "method": "PUT", "match": "partNumber=", "limit": 1},
        {"kind": "slowdown", "method": "PUT", "match": "partNumber=", "every": 2, "limit": 2},
        {"kind": "500", "method": "POST", "match": "uploadId=", "limit": 1},
        {"kind": "503", "method": "POST", "match": "uploads", "limit": 1},
        {"kind": "drop_response", "method": "GET", "match": "retried", "limit": 1},
        {"kind": "stall", "seconds": 1, "method": "GET", "match": "retried", "limit": 1},
    ])
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=5 * MiB,
                         max_concurrency=2)
    s3.upload_file(src, bucket, "retried", Config=cfg)
    dst = os.path.join(tmp, "dst")
    s3.download_file(bucket, "retried", dst, Config=TransferConfig(multipart_threshold=64 * MiB))

    def digest(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    check(digest(src) == digest(dst), "24 MiB upload + download through faults is byte-identical")
    faults = proxy.faults()
    print("    faults injected: %s" % json.dumps(faults, sort_keys=True))
    want = {"reset_before_body": 1, "reset_after_body": 1, "slowdown": 2, "error_500": 1,
            "error_503": 1, "drop_response": 1, "stall": 1}
    check(faults == want, "every rule of the retried transfer fired as planned")


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-s3-faultproxy.")
    srv = os.path.join(tmp, "srv")
    proxy = None
    started = False
    try:
        t0 = time.monotonic()
        subprocess.run(["bash", os.path.join(HERE, "moto.sh"), "start", srv], check=True,
                       env=dict(os.environ, MOTO_PYTHON=sys.executable))
        started = True
        print("moto start took %.1f s" % (time.monotonic() - t0))
        env = {}
        with open(os.path.join(srv, "env")) as f:
            for line in f:
                words = shlex.split(line)
                if len(words) == 2 and words[0] == "export":
                    key, _, value = words[1].partition("=")
                    env[key] = value
        proxy = Proxy(tmp, env["AWS_ENDPOINT_URL"])
        single_fault_checks(proxy, env)
        retried_transfer(proxy, env, tmp)
    finally:
        if proxy is not None:
            proxy.stop()
            if failures:
                with open(os.path.join(tmp, "proxy.log")) as f:
                    sys.stdout.write("---- proxy log ----\n" + f.read()[-4000:])
        if started:
            subprocess.run(["bash", os.path.join(HERE, "moto.sh"), "stop", srv])
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED: %d check(s): %s" % (len(failures), "; ".join(failures)))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
