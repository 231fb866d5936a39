"""A Hugging Face Hub that lives on 127.0.0.1, so uploads and downloads run for real with no network.

``huggingface_hub`` sends every request to ``HF_ENDPOINT``; pointing it here makes the real client
code (``create_repo``, ``upload_folder``, ``push_to_hub``, ``hf_hub_download`` and everything
Transformers builds on them) run over HTTP against this server. It implements the part of the Hub
API those calls use, with the Hub's status codes and ``X-Error-Code`` headers, so the client maps
failures to the same exceptions users see:

- ``POST /api/repos/create``, ``POST /api/validate-yaml`` (the model card's metadata), ``GET
  /api/models/{repo}[/revision/{rev}]``, ``POST /api/models/{repo}/branch/{branch}``;
- ``POST /api/models/{repo}/preupload/{rev}``, which answers ``regular`` for every file, so file
  content travels base64-encoded inside the commit rather than through LFS or Xet storage (which
  would need a second, content-addressed server; commits and downloads work alike for all three);
- ``POST /api/models/{repo}/commit/{rev}`` (the NDJSON commit: a header, then files to add or delete);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``;
- ``HEAD`` and ``GET /{repo}/resolve/{rev}/{path}`` with ``ETag``, ``X-Repo-Commit`` and
  ``Content-Length``.

Writes need ``Authorization: Bearer <token>`` with the server's token; private repos also need it
to be read. Only model repos exist, and downloads always send the whole file (no ``Range``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

# The largest request body read into memory: far above a tiny model's commit, far below harm.
MAX_BODY_BYTES = 256 * 1024 * 1024
REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
API_REPO = rf"/api/models/(?P<repo>{REPO_PART}/{REPO_PART})"
FILE_URL = rf"/(?P<repo>{REPO_PART}/{REPO_PART})/resolve/(?P<rev>[^/]+)/(?P<path>.+)"


@dataclass
class Commit:
    oid: str
    files: dict[str, str]  # path in repo -> blob id (the git sha1 of the content)
    timestamp: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)


class HubError(Exception):
    """An HTTP error answered the way the Hub answers it."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def git_blob_id(content: bytes) -> str:
    """The id git (and the Hub, as ``ETag`` and preupload ``oid``) gives a regular file's content."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class LoopbackHub:
    """The server: repos in memory, file contents as blobs in ``storage``. Use as a context manager
    or call ``start()`` and ``stop()``; ``endpoint`` is the value for ``HF_ENDPOINT``."""

    def __init__(self, storage: str | Path, token: str = "hf_loopback_token", user: str = "loopback-user"):
        self.blobs = Path(storage) / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.token, self.user = token, user
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []  # "METHOD path" of every request, for tests to inspect
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the loopback Hub is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LoopbackHub:
        handler = type("BoundHandler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = self._thread = None

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def read_file(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        """What the repo holds at ``path`` (for tests that inspect an upload)."""
        with self.lock:
            commit = self.find_commit(self.find_repo(repo_id, authorized=True), revision)
            return self.read_blob(commit, path)

    def list_files(self, repo_id: str, revision: str = "main") -> list[str]:
        with self.lock:
            return sorted(self.find_commit(self.find_repo(repo_id, authorized=True), revision).files)

    # The methods below run under ``self.lock``: the request handler takes it for every request.

    def find_repo(self, repo_id: str, authorized: bool) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and not authorized):
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return repo

    def find_commit(self, repo: Repo, revision: str) -> Commit:
        oid = repo.branches.get(revision, revision)
        if oid not in repo.commits:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[oid]

    def read_blob(self, commit: Commit, path: str) -> bytes:
        if path not in commit.files:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        return (self.blobs / commit.files[path]).read_bytes()

    def store(self, content: bytes) -> str:
        blob_id = git_blob_id(content)
        target = self.blobs / blob_id
        if not target.exists():
            target.write_bytes(content)
        return blob_id

    def add_commit(self, repo: Repo, branch: str, files: dict[str, str], message: str) -> Commit:
        parent = repo.branches.get(branch)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        digest = hashlib.sha1(json.dumps([parent, sorted(files.items()), message, stamp]).encode())
        digest.update(str(len(repo.commits)).encode())  # two identical commits in one second differ
        commit = Commit(digest.hexdigest(), dict(files), stamp)
        repo.commits[commit.oid] = commit
        repo.branches[branch] = commit.oid
        return commit


class _Handler(BaseHTTPRequestHandler):
    """Routes one request to the ``LoopbackHub`` bound as ``hub``; every answer has a length, so
    connections stay open between requests the way the client expects."""

    hub: LoopbackHub
    protocol_version = "HTTP/1.1"

    ROUTES = [
        (method, re.compile(pattern), name)
        for method, pattern, name in [
            ("POST", r"/api/repos/create", "create_repo"),
            ("POST", r"/api/validate-yaml", "validate_yaml"),
            ("GET", API_REPO, "repo_info"),
            ("GET", API_REPO + r"/revision/(?P<rev>[^/]+)", "repo_info"),
            ("POST", API_REPO + r"/branch/(?P<rev>[^/]+)", "branch"),
            ("POST", API_REPO + r"/preupload/(?P<rev>[^/]+)", "preupload"),
            ("POST", API_REPO + r"/commit/(?P<rev>[^/]+)", "commit"),
            ("GET", API_REPO + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
            ("GET", FILE_URL, "resolve"),
            ("HEAD", FILE_URL, "resolve"),
        ]
    ]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args) -> None:
        """Silent: the tests read ``hub.requests`` instead of a log on stderr."""

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.hub.requests.append(f"{method} {url.path}")
        self.query = parse_qs(url.query)
        try:
            body = self._read_body()
            for route_method, pattern, name in self.ROUTES:
                match = pattern.fullmatch(url.path)
                if route_method == method and match:
                    params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    with self.hub.lock:
                        getattr(self, f"on_{name}")(body=body, **params)
                    return
            raise HubError(404, f"the loopback Hub does not serve {method} {url.path}")
        except HubError as error:
            self._send_json({"error": error.message}, error.status, error.code, error.message)
        except (ValueError, KeyError, TypeError) as error:  # a malformed JSON or NDJSON body
            self._send_json({"error": f"bad request body: {error!r}"}, 400, None, "bad request body")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise HubError(411, "send a Content-Length; chunked bodies are not supported here")
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise HubError(413, f"request body of {length} bytes is over {MAX_BODY_BYTES}")
        return self.rfile.read(length) if length else b""

    @property
    def authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.hub.token}"

    def _require_write_access(self) -> None:
        if not self.authorized:
            message = (
                "Invalid credentials in Authorization header"
                if self.headers.get("Authorization")
                else "You must be authenticated to write to the Hub"
            )
            raise HubError(401, message)

    def _send_json(self, payload, status: int = 200, code: str | None = None, message: str | None = None):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code:
            self.send_header("X-Error-Code", code)
        if message:
            self.send_header("X-Error-Message", message)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # -- endpoints ---------------------------------------------------------------------------

    def on_create_repo(self, body: bytes) -> None:
        self._require_write_access()
        request = json.loads(body or b"{}")
        if request.get("type", "model") != "model":
            raise HubError(400, "the loopback Hub only hosts model repos")
        name = request.get("name", "")
        if not re.fullmatch(REPO_PART, name):
            raise HubError(400, f"invalid repo name {name!r}")
        repo_id = f"{request.get('organization') or self.hub.user}/{name}"
        url = f"{self.hub.endpoint}/{repo_id}"
        if repo_id in self.hub.repos:
            self._send_json({"error": "You already created this model repo", "url": url}, 409)
            return
        private = bool(request.get("private")) or request.get("visibility") == "private"
        repo = Repo(repo_id, private)
        self.hub.add_commit(repo, "main", {}, "initial commit")
        self.hub.repos[repo_id] = repo
        self._send_json({"url": url, "name": repo_id, "id": repo_id})

    def on_validate_yaml(self, body: bytes) -> None:
        """The model card check ``create_commit`` runs before uploading a README.md: its front matter
        must be a YAML mapping."""
        content = json.loads(body)["content"]
        front = re.match(r"---\n(.*?)\n---(?:\n|$)", content, re.DOTALL)
        try:
            metadata = yaml.safe_load(front.group(1)) if front else {}
        except yaml.YAMLError as error:
            self._send_json({"errors": [{"message": f"invalid YAML: {error}"}]}, 400)
            return
        if not isinstance(metadata, dict | None):
            self._send_json({"errors": [{"message": "the metadata must be a YAML mapping"}]}, 400)
            return
        self._send_json({"errors": [], "warnings": []})

    def on_repo_info(self, body: bytes, repo: str, rev: str = "main") -> None:
        found = self.hub.find_repo(repo, self.authorized)
        commit = self.hub.find_commit(found, rev)
        info = {
            "id": repo,
            "modelId": repo,
            "author": repo.split("/")[0],
            "sha": commit.oid,
            "private": found.private,
            "lastModified": commit.timestamp,
            "tags": [],
            "siblings": [{"rfilename": path} for path in sorted(commit.files)],
        }
        self._send_json(info)

    def on_branch(self, body: bytes, repo: str, rev: str) -> None:
        self._require_write_access()
        found = self.hub.find_repo(repo, True)
        if rev in found.branches:
            self._send_json({"error": f"Reference refs/heads/{rev} already exists"}, 409)
            return
        start = json.loads(body or b"{}").get("startingPoint") or "main"
        found.branches[rev] = self.hub.find_commit(found, start).oid
        self._send_json({})

    def on_preupload(self, body: bytes, repo: str, rev: str) -> None:
        self._require_write_access()
        commit = self.hub.find_commit(self.hub.find_repo(repo, True), rev)
        files = [
            {
                "path": entry["path"],
                "uploadMode": "regular",
                "shouldIgnore": False,
                "oid": commit.files.get(entry["path"]),
            }
            for entry in json.loads(body)["files"]
        ]
        self._send_json({"files": files, "commitOid": commit.oid})

    def on_commit(self, body: bytes, repo: str, rev: str) -> None:
        self._require_write_access()
        if self.query.get("create_pr"):
            raise HubError(400, "the loopback Hub has no pull requests")
        found = self.hub.find_repo(repo, True)
        if rev not in found.branches:
            raise HubError(404, f"Invalid rev id: {rev} is not a branch", "RevisionNotFound")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "a commit starts with a header line")
        header = lines[0]["value"]
        if header.get("parentCommit") is not None:
            raise HubError(400, "the loopback Hub does not check parent commits")
        files = dict(found.commits[found.branches[rev]].files)
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value", {})
            if key == "file" and value.get("encoding") == "base64":
                files[value["path"]] = self.hub.store(base64.b64decode(value["content"]))
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"cannot delete {value['path']}: no such file", "EntryNotFound")
            else:
                raise HubError(400, f"unsupported commit operation {key!r}: only base64 files and deletions")
        commit = self.hub.add_commit(found, rev, files, header.get("summary", ""))
        self._send_json(
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{self.hub.endpoint}/{repo}/commit/{commit.oid}",
                "pullRequestUrl": None,
            }
        )

    def on_tree(self, body: bytes, repo: str, rev: str, path: str = "") -> None:
        commit = self.hub.find_commit(self.hub.find_repo(repo, self.authorized), rev)
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        below = [p for p in sorted(commit.files) if p.startswith(prefix)]
        if prefix and not below:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        entries, folders = [], set()
        for file_path in below:
            parts = file_path[len(prefix) :].split("/")
            for depth in range(1, len(parts) if recursive else min(len(parts), 2)):
                folder = prefix + "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    entries.append({"type": "directory", "oid": commit.oid, "size": 0, "path": folder})
            if recursive or len(parts) == 1:
                blob_id = commit.files[file_path]
                size = (self.hub.blobs / blob_id).stat().st_size
                entries.append({"type": "file", "oid": blob_id, "size": size, "path": file_path})
        self._send_json(entries)

    def on_resolve(self, body: bytes, repo: str, rev: str, path: str) -> None:
        commit = self.hub.find_commit(self.hub.find_repo(repo, self.authorized), rev)
        content = self.hub.read_blob(commit, path)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(content)))
        self.send_header("ETag", f'"{commit.files[path]}"')
        self.send_header("X-Repo-Commit", commit.oid)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(content)
