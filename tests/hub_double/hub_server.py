"""A stand-in for the Hugging Face hub's HTTP API: test plumbing, never a code path production uses.

Serves the endpoints huggingface_hub calls for snapshot_download, from real files with real hashes:

  GET  /api/models/<org>/<name>/revision/<rev>          model info (sha = the commit)
  GET  /api/models/<org>/<name>/tree/<rev>?recursive=1  files: path, size, oid (git blob sha1), lfs {oid sha256}
  HEAD /<org>/<name>/resolve/<rev>/<path>               X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size
  GET  /<org>/<name>/resolve/<rev>/<path>               the bytes; Range: bytes=N- or N-M answers 206

A repo is a folder <root>/<org>/<name>/ whose files are the repo's files; its commit is a hash of
the file list, so the same files give the same commit. *.safetensors, *.gguf and *.bin are LFS
files (sha256 ETag, as on the hub); the rest are plain git blobs. With --token, every request
needs "Authorization: Bearer <token>" (a gated repo: 401 GatedRepo without it).

Test controls (JSON): GET /_stats (bytes of file bodies served, per path, and every request),
POST /_reset, POST /_faults {"drop": {"<path>": N}} closes the connection once after N bytes of
that file; {"corrupt": ["<path>"]} serves the file with one byte flipped (same size, the listed
hash stays the true one); {"rate": {"<path>": B}} serves that file at B bytes a second;
{"down": true} answers 503 to everything.

  python3 hub_server.py --root DIR --port 0 [--token T] [--bind 127.0.0.1]   # prints "PORT N"
"""
import argparse
import fnmatch
import hashlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS = ["*.safetensors", "*.gguf", "*.bin"]


def file_entry(root, rel):
    path = os.path.join(root, rel)
    data = open(path, "rb").read()
    entry = {"path": rel, "size": len(data),
             "blob_id": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
    if any(fnmatch.fnmatch(os.path.basename(rel), p) for p in LFS):
        entry["sha256"] = hashlib.sha256(data).hexdigest()
    return entry


def load_repo(folder):
    files = {}
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), folder).replace(os.sep, "/")
            files[rel] = file_entry(folder, rel)
    commit = hashlib.sha1(json.dumps(sorted((p, e["blob_id"]) for p, e in files.items())).encode()).hexdigest()
    return {"dir": folder, "files": files, "commit": commit}


class Hub(object):
    def __init__(self, root, token=None):
        self.root = root
        self.token = token
        self.lock = threading.Lock()
        self.repos = {}
        for org in sorted(os.listdir(root)):
            for name in sorted(os.listdir(os.path.join(root, org))):
                self.repos[org + "/" + name] = load_repo(os.path.join(root, org, name))
        self.reset()

    def reset(self):
        with self.lock:
            self.stats = {"bytes": 0, "by_path": {}, "requests": []}
            self.faults = {"drop": {}, "corrupt": [], "rate": {}, "down": False}

    def count(self, repo, path, n):
        with self.lock:
            self.stats["bytes"] += n
            key = repo + "/" + path
            self.stats["by_path"][key] = self.stats["by_path"].get(key, 0) + n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None

    def log_message(self, *args):
        pass

    def send_json(self, status, data, headers=None):
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message):
        self.send_json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def repo_and_rest(self, parts):
        for n in (2, 1):
            repo = "/".join(parts[:n])
            if repo in self.hub.repos:
                return repo, parts[n:]
        return None, parts

    def authorised(self):
        if not self.hub.token:
            return True
        return self.headers.get("Authorization", "") == "Bearer " + self.hub.token

    def revision_ok(self, repo, rev):
        return rev in ("main", self.hub.repos[repo]["commit"])

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/_reset":
            self.hub.reset()
        elif self.path == "/_faults":
            with self.hub.lock:
                self.hub.faults.update(body)
        else:
            return self.error(404, "NotFound", "no such control")
        self.send_json(200, {"ok": True})

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/_stats":
            with self.hub.lock:
                return self.send_json(200, self.hub.stats)
        with self.hub.lock:
            self.hub.stats["requests"].append({"method": self.command, "path": self.path,
                                               "range": self.headers.get("Range")})
            down = self.hub.faults["down"]
        if down:
            return self.error(503, "ServiceUnavailable", "the stand-in hub is down (fault)")
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts[:2] == ["api", "models"]:
            repo, rest = self.repo_and_rest(parts[2:])
            if repo is None:
                return self.error(401, "RepoNotFound", "Repository not found")
            if not self.authorised():
                return self.unauthorised(repo)
            if len(rest) >= 2 and rest[0] in ("revision", "tree"):
                rev = rest[1]
                if not self.revision_ok(repo, rev):
                    return self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
                data = self.hub.repos[repo]
                if rest[0] == "revision":
                    return self.send_json(200, {"id": repo, "modelId": repo, "sha": data["commit"], "private": False,
                                                "gated": "manual" if self.hub.token else False, "tags": [],
                                                "siblings": [{"rfilename": p} for p in sorted(data["files"])]})
                return self.send_json(200, [self.tree_entry(e) for _p, e in sorted(data["files"].items())])
            return self.error(404, "NotFound", "unknown API path")
        repo, rest = self.repo_and_rest(parts)
        if repo is None or len(rest) < 3 or rest[0] != "resolve":
            return self.error(404, "RepoNotFound" if repo is None else "EntryNotFound", "not found")
        if not self.authorised():
            return self.unauthorised(repo)
        if not self.revision_ok(repo, rest[1]):
            return self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rest[1])
        self.send_file(repo, "/".join(rest[2:]))

    def unauthorised(self, repo):
        if self.headers.get("Authorization"):
            return self.error(401, "Unauthorized", "Invalid credentials in Authorization header")
        return self.error(401, "GatedRepo", "Access to model %s is restricted. You must have access to it and be "
                                            "authenticated to access it. Please log in." % repo)

    @staticmethod
    def tree_entry(e):
        out = {"type": "file", "oid": e["blob_id"], "size": e["size"], "path": e["path"]}
        if "sha256" in e:
            out["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}
        return out

    def send_file(self, repo, path):
        data = self.hub.repos[repo]
        entry = data["files"].get(path)
        if entry is None:
            return self.error(404, "EntryNotFound", "%s does not exist on main" % path)
        size = entry["size"]
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng[6:].split("-")[0]:
            first, last = rng[6:].split("-")[:2]
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        partial = (start, end) != (0, size - 1)
        self.send_response(206 if partial else 200)
        etag = entry.get("sha256") or entry["blob_id"]
        self.send_header("ETag", '"%s"' % etag)
        if "sha256" in entry:
            self.send_header("X-Linked-Etag", '"%s"' % etag)
            self.send_header("X-Linked-Size", str(size))
        self.send_header("X-Repo-Commit", data["commit"])
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end + 1 - start))
        if partial:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(os.path.join(data["dir"], path), "rb") as f:
            body = bytearray(f.read())
        with self.hub.lock:
            drop = self.hub.faults["drop"].pop(path, None)
            corrupt = path in self.hub.faults["corrupt"]
            rate = self.hub.faults["rate"].get(path)
        if corrupt:
            body[len(body) // 2] ^= 0xFF
        body = bytes(body[start:end + 1])
        if drop is not None and drop < len(body):
            self.wfile.write(body[:drop])
            self.wfile.flush()
            self.hub.count(repo, path, drop)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        step = max(1, rate // 10) if rate else len(body) or 1
        for i in range(0, len(body), step):
            self.wfile.write(body[i:i + step])
            self.hub.count(repo, path, len(body[i:i + step]))
            if rate:
                time.sleep(0.1)


def serve(root, port=0, token=None, bind="127.0.0.1"):
    """Starts the stand-in in a thread; returns (server, port)."""
    handler = type("BoundHandler", (Handler,), {"hub": Hub(root, token)})
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token")
    ap.add_argument("--bind", default="127.0.0.1")
    args = ap.parse_args()
    server, port = serve(args.root, args.port, args.token, args.bind)
    print("PORT %d" % port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
