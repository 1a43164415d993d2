#!/usr/bin/env python3
"""A fault-injecting stand-in for S3 on loopback, for the client's retry
tests (a test double for faults only: real S3 behaviour is tested against
moto). It answers by key, counting requests per key:

  PUT  /b/throttled   503 SlowDown, then 500 InternalError, then 200
  POST /b/complete?uploadId=u   200 with an <Error> body (S3 does that),
                      then 200 with an empty ETag (as radosgw does)
  PUT  /b/broken      a 200 header promising 1000 bytes, 10 bytes, close;
                      then 200
  anything else       400 BadRequest

Every request must carry Authorization, x-amz-date and x-amz-content-sha256.
Usage: flaky-s3.py PORTFILE   (binds 127.0.0.1:0, writes the port there)
"""
import http.server
import sys

counts = {}

ERR = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code>"
       "<Message>{}</Message><RequestId>flaky</RequestId></Error>")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("flaky-s3: " + (fmt % args) + "\n")

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split("?")[0]
        for h in ("Authorization", "x-amz-date", "x-amz-content-sha256"):
            if not self.headers.get(h):
                self.reply(400, ERR.format("MissingSecurityHeader", h).encode())
                return
        key = path.rsplit("/", 1)[-1]
        n = counts.get(key, 0) + 1
        counts[key] = n
        if key == "throttled":
            if n == 1:
                self.reply(503, ERR.format("SlowDown", "Please reduce your request rate.").encode())
            elif n == 2:
                self.reply(500, ERR.format("InternalError", "We encountered an internal error.").encode())
            else:
                self.reply(200, b"", {"ETag": '"0123456789abcdef"'})
        elif key == "complete":
            if n == 1:
                self.reply(200, ERR.format("InternalError", "error inside a 200").encode())
            else:
                self.reply(200, b"<CompleteMultipartUploadResult><Location>x</Location>"
                                b"<Bucket>b</Bucket><Key>complete</Key><ETag></ETag>"
                                b"</CompleteMultipartUploadResult>")
        elif key == "broken":
            if n == 1:
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"0123456789")
                self.wfile.flush()
                self.close_connection = True
            else:
                self.reply(200, b"", {"ETag": '"fedcba9876543210"'})
        else:
            self.reply(400, ERR.format("BadRequest", "unknown key").encode())

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()
