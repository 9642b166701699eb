#!/usr/bin/env python3
"""A smart-HTTP Git server for tests: runs the real `git http-backend` as CGI, with optional
HTTP basic auth, and logs every request (method, path, query, status) to a file so tests can
count them. With --dumb it serves the repositories as static files (the dumb protocol).

Usage: git_http.py --root DIR --port N --log FILE [--user U --password P] [--dumb]
                   [--tls-cert PEM --tls-key PEM] [--delay-ms N]
"""
import argparse
import base64
import os
import subprocess
import sys
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ARGS = None
LOG_LOCK = threading.Lock()


def log(line):
    with LOG_LOCK:
        with open(ARGS.log, "a") as f:
            f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def authorized(self):
        if not ARGS.user:
            return True
        want = "Basic " + base64.b64encode(f"{ARGS.user}:{ARGS.password}".encode()).decode()
        return self.headers.get("Authorization") == want

    def reply(self, status, headers, body):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        url = urlsplit(self.path)
        if ARGS.delay_ms:
            time.sleep(ARGS.delay_ms / 1000.0)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Authorization"):
            # What a client sent, so tests can tell which credentials reached this server.
            with LOG_LOCK:
                with open(ARGS.log + ".auth", "a") as f:
                    f.write(self.headers.get("Authorization") + "\n")
        if not self.authorized():
            log(f"{self.command} {url.path} {url.query} 401")
            self.reply(401, [("WWW-Authenticate", 'Basic realm="git"')], b"unauthorized\n")
            return
        if ARGS.dumb:
            path = os.path.normpath(os.path.join(ARGS.root, url.path.lstrip("/")))
            if not path.startswith(os.path.abspath(ARGS.root)) or not os.path.isfile(path):
                log(f"{self.command} {url.path} {url.query} 404")
                self.reply(404, [], b"not found\n")
                return
            with open(path, "rb") as f:
                data = f.read()
            log(f"{self.command} {url.path} {url.query} 200")
            self.reply(200, [("Content-Type", "application/octet-stream")], data)
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": ARGS.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": ARGS.user or "",
        }
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            if ":" not in line:
                continue
            k, v = line.split(":", 1)
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            else:
                headers.append((k, v.strip()))
        log(f"{self.command} {url.path} {url.query} {status}")
        self.reply(status, headers, payload)

    do_GET = handle_any
    do_POST = handle_any


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--dumb", action="store_true")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--delay-ms", type=int, default=0)
    ARGS = p.parse_args()
    ARGS.root = os.path.abspath(ARGS.root)
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    if ARGS.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ARGS.tls_cert, ARGS.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
