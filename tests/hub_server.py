"""A model hub on this machine that speaks the file APIs the model_download module reads: ModelScope's
(/api/v1/models/<repo>/repo/files, /repo?FilePath=) and the Hugging Face Hub's, which hf-mirror.com serves too
(/api/models/<repo>/revision/<rev>, /tree/<commit> with Link pages, /<repo>/resolve/<commit>/<path>).

It serves one repository from a folder, with the checksums each hub lists (sha256 of the content; for a Hugging
Face file outside LFS, git's blob sha1), range requests as the hubs' CDNs answer them, and the faults a real
download meets, each set per test: a file whose first download arrives corrupted, a connection that drops part
way, a server that ignores ranges, a token it requires, and any listing a test wants to send instead.
"""
import hashlib
import http.server
import json
import threading
import urllib.parse

BRANCHES = {"modelscope": "master", "huggingface": "main"}


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub:
    def __init__(self, folder, repo="Qwen/Qwen3-VL-8B-Instruct", host="127.0.0.1", page_size=5):
        self.folder, self.repo, self.page_size = folder, repo, page_size
        self.files = {path.relative_to(folder).as_posix(): path.read_bytes()
                      for path in sorted(folder.rglob("*")) if path.is_file()}
        self.commit = hashlib.sha1("".join(sorted(self.files)).encode()).hexdigest()
        self.corrupt_once, self.cut_once, self.ignore_range, self.token = set(), {}, False, None
        self.listing = None  # a test's own listing, sent instead of the real one
        self.requests = []  # (path of the file, Range header) of every download
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 (the name http.server calls)
                hub.answer(self)

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = "http://%s:%d" % (host, self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    # --- listings, as each hub gives them ------------------------------------------------------------------
    def modelscope_files(self):
        files = [{"Name": path.rsplit("/", 1)[-1], "Path": path, "Type": "blob", "Size": len(data),
                  "Sha256": hashlib.sha256(data).hexdigest(), "Revision": self.commit,
                  "IsLFS": path.endswith(".safetensors")} for path, data in self.files.items()]
        # Git's own files are listed too, with no checksum; ModelScope's client skips them.
        files.append({"Name": ".gitattributes", "Path": ".gitattributes", "Type": "blob", "Size": 0, "Sha256": "",
                      "Revision": self.commit})
        return {"Code": 200, "Success": True, "Message": "success", "Data": {"Files": files}}

    def hf_tree(self):
        entries = []
        for path, data in self.files.items():
            entry = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha1(data)}
            if path.endswith(".safetensors"):  # LFS, as .gitattributes makes them on the hub
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        return entries

    # --- requests -----------------------------------------------------------------------------------------
    def answer(self, request):
        url = urllib.parse.urlsplit(request.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = urllib.parse.unquote(url.path)
        if self.token and request.headers.get("Authorization") != "Bearer %s" % self.token:
            return self.send_json(request, 401, {"error": "Invalid credentials in Authorization header"})
        modelscope = "/api/v1/models/%s/repo" % self.repo
        if path == modelscope + "/files":
            if query.get("Revision") not in (BRANCHES["modelscope"], self.commit):
                return self.send_json(request, 404, {"Code": 10010205, "Message": "revision not found",
                                                     "Success": False})
            return self.send_json(request, 200, self.listing or self.modelscope_files())
        if path == modelscope:
            return self.send_file(request, query.get("FilePath", ""))
        if path == "/api/models/%s/revision/%s" % (self.repo, BRANCHES["huggingface"]):
            return self.send_json(request, 200, {"id": self.repo, "sha": self.commit,
                                                 "siblings": [{"rfilename": name} for name in self.files]})
        tree = "/api/models/%s/tree/%s" % (self.repo, self.commit)
        if path == tree:
            entries = self.listing or self.hf_tree()
            start = int(query.get("cursor", 0))
            page = entries[start:start + self.page_size]
            headers = {}
            if start + self.page_size < len(entries):
                headers["Link"] = '<%s%s?recursive=true&cursor=%d>; rel="next"' % (
                    self.endpoint, tree, start + self.page_size)
            return self.send_json(request, 200, page, headers)
        resolve = "/%s/resolve/%s/" % (self.repo, self.commit)
        if path.startswith(resolve):
            return self.send_file(request, path[len(resolve):])
        return self.send_json(request, 404, {"error": "Repository Not Found"})

    def send_json(self, request, status, body, headers=None):
        data = json.dumps(body).encode()
        request.send_response(status)
        for name, value in dict(headers or {}, **{"Content-Type": "application/json",
                                                  "Content-Length": str(len(data))}).items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def send_file(self, request, name):
        if name not in self.files:
            return self.send_json(request, 404, {"error": "Entry not found"})
        data, wanted = self.files[name], request.headers.get("Range")
        self.requests.append((name, wanted))
        start = int(wanted[len("bytes="):].split("-")[0]) if wanted and not self.ignore_range else 0
        if name in self.corrupt_once:
            self.corrupt_once.discard(name)
            data = bytes(byte ^ 0xFF for byte in data[:16]) + data[16:]
        request.send_response(206 if start else 200)
        request.send_header("Content-Length", str(len(data) - start))
        if start:
            request.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        request.send_header("X-Repo-Commit", self.commit)
        request.end_headers()
        body = data[start:]
        if name in self.cut_once:
            body = body[:self.cut_once.pop(name)]
            request.close_connection = True
        request.wfile.write(body)
