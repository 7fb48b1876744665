#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub's HTTP API, for Shoal's tests (stdlib only).

Usage:
  python3 tests/hub/fake_hub.py --config CONFIG.json --port-file FILE [--host 127.0.0.1]
                                [--log LOG.jsonl]

It binds port 0 on --host and, once listening, writes the port number (one line) to --port-file
(written to a temporary name and renamed, so a reader never sees half a file). Every request is
logged, before it is answered, as one JSON line to --log:
  {"method", "path", "query", "range": header or null, "authorization": bool (header present),
   "host": the local address the request reached, "hostHeader": the Host header}
so a test that has its answer can read the log line of that request.

CONFIG.json:
  {"repos": [{"id": "owner/name", "downloads": 10, "likes": 1,
              "lastModified": "2026-01-01T00:00:00.000Z", "gated": false,
              "revisions": ["main"],                      # optional, default ["main"]
              "files": [{"path": "x-Q4_1.gguf", "source": "/abs/path/file",
                         "sha256": "optional override: publish this (wrong) hash"},
                        {"path": "README.md", "text": "inline content"}]}],
   "token": "the token gated repos require (optional; without it gated files are never served)",
   "dropAfterBytes": N,      # optional: the FIRST GET of each file's bytes sends only N bytes of
                             # the body, then closes the connection (a dropped transfer)
   "throttleBytesPerS": N,   # optional: file bytes are sent at about this rate
   "redirectHost": "127.0.0.2"}  # optional: /resolve/ answers 302 to
                             # http://<redirectHost>:<port>/cdn/<owner>/<name>/<revision>/<path>,
                             # served by this same server listening there too (a "CDN" host, so a
                             # test can check the token is not sent across the redirect)

Endpoints, with the shapes the Hub documents (https://huggingface.co/docs/hub/api and
https://huggingface.co/docs/huggingface_hub/package_reference/hf_api):
  GET /api/models?search=TEXT&filter=gguf&sort=downloads|lastModified&direction=-1&limit=N
      -> [{"_id", "id", "modelId", "downloads", "likes", "lastModified", "gated": false|"auto",
           "private", "tags"}]; search is a case-insensitive substring of the id; filter=gguf
      keeps repos with a .gguf file; direction=-1 sorts descending (the default here too).
  GET /api/models/{owner}/{name}/tree/{revision}?recursive=true
      -> [{"type": "file", "oid", "size", "path", "lfs": {"oid": sha256, "size",
           "pointerSize": 134}}]; files given by "text" have no "lfs" (as small git files).
      Like the Hub, the tree of a gated repository is public.
  GET and HEAD /{owner}/{name}/resolve/{revision}/{path}
      -> 200, or 206 for "Range: bytes=N-" / "bytes=N-M" (Content-Range), 416 when the range
         starts past the end; Content-Length, Accept-Ranges: bytes, ETag (the sha256 in quotes
         for LFS files, as the Hub's X-Linked-Etag), X-Repo-Commit; 302 when redirectHost is set.
Errors as the Hub sends them (the header huggingface_hub's hf_raise_for_status reads, plus a
JSON body {"error": message} and the X-Error-Message header):
  gated repo without "Authorization: Bearer <token>" -> 401, X-Error-Code: GatedRepo
  unknown repository -> 404, X-Error-Code: RepoNotFound
  unknown revision   -> 404, X-Error-Code: RevisionNotFound
  unknown file       -> 404, X-Error-Code: EntryNotFound
"""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Hub:
    """The configuration, read once, with each file's bytes and hashes."""

    def __init__(self, config):
        self.token = config.get("token")
        self.drop_after = config.get("dropAfterBytes")
        self.throttle = config.get("throttleBytesPerS")
        self.redirect_host = config.get("redirectHost")
        self.port = 0
        self.repos = {}
        self.dropped = set()  # (repo, path) whose first GET was already cut
        self.lock = threading.Lock()
        for repo in config.get("repos", []):
            files = {}
            for f in repo.get("files", []):
                if "source" in f:
                    with open(f["source"], "rb") as fh:
                        data = fh.read()
                    lfs = True
                else:
                    data = f.get("text", "").encode()
                    lfs = False
                files[f["path"]] = {
                    "data": data,
                    "lfs": lfs,
                    "sha256": f.get("sha256") or hashlib.sha256(data).hexdigest(),
                    # The git blob id of the file (or of its LFS pointer): a sha1, as the Hub's oid.
                    "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
                }
            self.repos[repo["id"]] = {"meta": repo, "files": files}

    def first_get(self, key):
        with self.lock:
            if key in self.dropped:
                return False
            self.dropped.add(key)
            return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-hub"

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    # --- plumbing -------------------------------------------------------------------------

    def hub(self):
        return self.server.hub

    def record(self, path, query):
        log = self.server.log
        if log is None:
            return
        line = json.dumps({
            "method": self.command,
            "path": path,
            "query": query,
            "range": self.headers.get("Range"),
            "authorization": self.headers.get("Authorization") is not None,
            "host": self.server.server_address[0],
            "hostHeader": self.headers.get("Host"),
        })
        with self.server.log_lock:
            log.write(line + "\n")
            log.flush()

    def send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_code(self, status, code, message):
        self.send_json(status, {"error": message},
                       {"X-Error-Code": code, "X-Error-Message": message})

    # --- routes ---------------------------------------------------------------------------

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def route(self):
        parsed = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(parsed.path)
        query = urllib.parse.parse_qs(parsed.query)
        self.record(path, parsed.query)
        parts = path.strip("/").split("/")
        try:
            if self.command == "GET" and path.rstrip("/") == "/api/models":
                return self.search(query)
            if (self.command == "GET" and len(parts) >= 6 and parts[0] == "api"
                    and parts[1] == "models" and parts[4] == "tree"):
                return self.tree(parts[2] + "/" + parts[3], parts[5])
            if len(parts) >= 5 and parts[2] == "resolve":
                return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
            if len(parts) >= 5 and parts[0] == "cdn":
                return self.serve_file(parts[1] + "/" + parts[2], parts[3], "/".join(parts[4:]),
                                       check_gate=False)
            self.send_error_code(404, "NotFound", "no such endpoint: " + path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def search(self, query):
        text = (query.get("search", [""])[0]).lower()
        want_gguf = "gguf" in query.get("filter", [])
        sort = query.get("sort", ["downloads"])[0]
        direction = query.get("direction", ["-1"])[0]
        limit = int(query.get("limit", ["1000"])[0])
        found = []
        for repo_id, repo in self.hub().repos.items():
            meta = repo["meta"]
            if text and text not in repo_id.lower():
                continue
            if want_gguf and not any(p.endswith(".gguf") for p in repo["files"]):
                continue
            found.append({
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "downloads": meta.get("downloads", 0),
                "likes": meta.get("likes", 0),
                "lastModified": meta.get("lastModified", "2026-01-01T00:00:00.000Z"),
                # The Hub writes false, "auto" or "manual".
                "gated": "auto" if meta.get("gated") else False,
                "private": False,
                "tags": ["gguf"],
            })
        key = "lastModified" if sort == "lastModified" else "downloads"
        found.sort(key=lambda r: r[key], reverse=(direction != "1"))
        self.send_json(200, found[:limit])

    def lookup(self, repo_id, revision):
        """The repo, or None after sending the Hub's 404."""
        repo = self.hub().repos.get(repo_id)
        if repo is None:
            self.send_error_code(404, "RepoNotFound", "Repository not found")
            return None
        if revision not in repo["meta"].get("revisions", ["main"]):
            self.send_error_code(404, "RevisionNotFound", "Invalid rev id: " + revision)
            return None
        return repo

    def tree(self, repo_id, revision):
        repo = self.lookup(repo_id, revision)
        if repo is None:
            return
        entries = []
        for path, f in repo["files"].items():
            entry = {"type": "file", "oid": f["oid"], "size": len(f["data"]), "path": path}
            if f["lfs"]:
                entry["lfs"] = {"oid": f["sha256"], "size": len(f["data"]), "pointerSize": 134}
            entries.append(entry)
        self.send_json(200, entries)

    def resolve(self, repo_id, revision, path):
        hub = self.hub()
        if hub.redirect_host and self.server.server_address[0] != hub.redirect_host:
            if self.gate_refuses(repo_id) or self.lookup_file(repo_id, revision, path) is None:
                return
            quoted = urllib.parse.quote(f"/cdn/{repo_id}/{revision}/{path}")
            location = f"http://{hub.redirect_host}:{hub.port}{quoted}"
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.serve_file(repo_id, revision, path, check_gate=True)

    def gate_refuses(self, repo_id):
        """Sends the Hub's 401 when `repo_id` is gated and the request lacks the token."""
        repo = self.hub().repos.get(repo_id)
        if repo is None or not repo["meta"].get("gated"):
            return False
        token = self.hub().token
        if token and self.headers.get("Authorization") == "Bearer " + token:
            return False
        self.send_error_code(
            401, "GatedRepo",
            f"Access to model {repo_id} is restricted. You must have access to it and be "
            "authenticated to access it. Please log in.")
        return True

    def lookup_file(self, repo_id, revision, path):
        repo = self.lookup(repo_id, revision)
        if repo is None:
            return None
        f = repo["files"].get(path)
        if f is None:
            self.send_error_code(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"")
            return None
        return f

    def serve_file(self, repo_id, revision, path, check_gate):
        if check_gate and self.gate_refuses(repo_id):
            return
        f = self.lookup_file(repo_id, revision, path)
        if f is None:
            return
        data = f["data"]
        size = len(data)
        start, end = 0, size - 1
        status = 200
        spec = self.headers.get("Range")
        if spec:
            rng = parse_range(spec)
            if rng is None or rng[0] >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start = rng[0]
            end = size - 1 if rng[1] is None else min(rng[1], size - 1)
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"' + (f["sha256"] if f["lfs"] else f["oid"]) + '"')
        self.send_header("X-Repo-Commit", "0" * 40)
        if f["lfs"]:
            self.send_header("X-Linked-Size", str(size))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        body = data[start:end + 1]
        hub = self.hub()
        if hub.drop_after is not None and hub.first_get((repo_id, path)):
            self.send_body(body[:hub.drop_after])
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_body(body)

    def send_body(self, body):
        rate = self.hub().throttle
        if not rate:
            self.wfile.write(body)
            return
        chunk = max(1, int(rate) // 20)
        for i in range(0, len(body), chunk):
            self.wfile.write(body[i:i + chunk])
            self.wfile.flush()
            time.sleep(chunk / rate)


def parse_range(spec):
    """(start, end or None) of "bytes=N-" / "bytes=N-M"; None for anything else."""
    if not spec.startswith("bytes="):
        return None
    first, sep, last = spec[len("bytes="):].partition("-")
    if not sep or not first.isdigit() or (last and not last.isdigit()):
        return None
    start, end = int(first), (int(last) if last else None)
    if end is not None and end < start:
        return None
    return start, end


def make_server(host, port, hub, log, log_lock):
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.hub = hub
    server.log = log
    server.log_lock = log_lock
    return server


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--log")
    args = ap.parse_args()
    with open(args.config) as fh:
        hub = Hub(json.load(fh))
    log = open(args.log, "a") if args.log else None
    log_lock = threading.Lock()

    servers = []
    for _ in range(50):  # the redirect host must get the same port: retry when it is taken
        main_server = make_server(args.host, 0, hub, log, log_lock)
        port = main_server.server_address[1]
        if not hub.redirect_host:
            servers = [main_server]
            break
        try:
            servers = [main_server, make_server(hub.redirect_host, port, hub, log, log_lock)]
            break
        except OSError:
            main_server.server_close()
    if not servers:
        sys.exit("fake_hub: could not bind the redirect host on the same port")
    hub.port = servers[0].server_address[1]

    for extra in servers[1:]:
        threading.Thread(target=extra.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{hub.port}\n")
    os.replace(tmp, args.port_file)
    try:
        servers[0].serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
