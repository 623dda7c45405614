# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the model_download module does (library/model_download.py holds its documentation and main()): a model
repository fetched from ModelScope, hf-mirror.com or Hugging Face at a pinned revision into a folder, each file
checked against the hub's checksum, resumed when cut short, and recorded so that a complete folder asks nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math
import os
import re
import socket
import time
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import quote, quote_plus, urljoin, urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
)

ENDPOINTS = {"modelscope": "https://www.modelscope.cn", "hf_mirror": "https://hf-mirror.com",
             "huggingface": "https://huggingface.co"}
RECORD = ".fleet-download.json"
PARTS = ".fleet-download"
COMMIT = re.compile(r"[0-9a-f]{40}")
DIGESTS = {"sha256": re.compile(r"[0-9a-f]{64}"), "git-sha1": re.compile(r"[0-9a-f]{40}")}
# A model repository lists tens of files; an answer far beyond this is no listing.
LISTING_MAX_BYTES = 16 << 20
LISTING_MAX_FILES = 10000
LISTING_MAX_PAGES = 1000
CHUNK = 1 << 20
# ModelScope's listing has git files its own client skips.
SKIPPED = (".gitattributes", ".gitignore")


class DownloadError(Exception):
    """The folder could not be made complete; the message says why and how to fix it."""


class HubFile(object):
    """One file as the hub lists it: its path in the repository, size, checksum and download address."""

    def __init__(self, path, size, algorithm, digest, url):
        self.path, self.size, self.algorithm, self.digest, self.url = path, size, algorithm, digest, url

    def record(self, stat):
        return {"size": self.size, "mtime_ns": stat.st_mtime_ns, "algorithm": self.algorithm, "digest": self.digest}


def path_problem(name):
    """Why a file name from the hub is no plain path inside the model folder, or None."""
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        return "%r is not a file name" % (name,)
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return "%r is not a plain path inside the repository" % name
    if parts[0] in (PARTS, RECORD):
        return "%r is a name this module keeps for itself" % name
    return None


class NoAuthOnOtherHosts(HTTPRedirectHandler):
    """Follows redirects, but sends the token only to the host it was meant for (a CDN gets none)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        old, target = urlsplit(req.full_url), urlsplit(newurl)
        if target.scheme not in ("http", "https") or (old.scheme, target.scheme) == ("https", "http"):
            raise DownloadError("%s redirected %s to %s, which this module does not follow (only http and https, "
                                "never from https to http). Fix: check model_weights_hub_endpoint"
                                % (old.netloc, old.path, newurl[:200]))
        new = HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if new is not None and target.netloc != old.netloc:
            for header in ("Authorization", "Cookie"):
                new.headers.pop(header, None)
                new.unredirected_hdrs.pop(header, None)
        return new


class Hub(object):
    """The hub's API, as the source speaks it: list the files at a revision, open one file from an offset."""

    def __init__(self, params):
        self.source, self.repo, self.revision = params["source"], params["repo"], params["revision"]
        self.endpoint = (params["endpoint"] or ENDPOINTS[self.source]).rstrip("/")
        self.timeout, self.token = params["timeout"], params["token"]
        self.opener = build_opener(NoAuthOnOtherHosts)

    def request(self, url, offset=0):
        request = Request(url, headers={"Accept-Encoding": "identity", "User-Agent": "ascend-fleet-model-download"})
        if self.token:
            request.add_header("Authorization", "Bearer %s" % self.token)
            if self.source == "modelscope":
                request.add_header("Cookie", "m_session_id=%s" % self.token)
        if offset:
            request.add_header("Range", "bytes=%d-" % offset)
        return self.opener.open(request, timeout=self.timeout)

    def get_json(self, url, what):
        """(the JSON answer, the URL of its next page or None)."""
        try:
            with self.request(url) as answer:
                body = answer.read(LISTING_MAX_BYTES + 1)
                link = answer.headers.get("Link") or ""
        except HTTPError as error:
            raise DownloadError(self.refusal(error, what)) from None
        except (URLError, HTTPException, OSError) as error:
            raise DownloadError("could not reach %s for %s: %s. Fix: check that the host reaches it (proxy: "
                                "https_proxy, firewall, DNS), or fill the folder from the controller "
                                "(model_weights_source: controller)" % (self.endpoint, what, reason(error))) from None
        if len(body) > LISTING_MAX_BYTES:
            raise DownloadError("%s answered %s with more than %d MB, which is no file listing. Fix: check "
                                "model_weights_hub_endpoint" % (self.endpoint, what, LISTING_MAX_BYTES >> 20))
        following = re.search(r'<([^>]+)>\s*;\s*rel="next"', link)
        try:
            return json.loads(body.decode("utf-8")), urljoin(url, following.group(1)) if following else None
        except (ValueError, RecursionError):
            raise DownloadError("%s answered %s with something that is not JSON (%r). Fix: check that "
                                "model_weights_hub_endpoint is the hub's address for source %s"
                                % (self.endpoint, what, body[:120], self.source)) from None

    def refusal(self, error, what):
        if error.code in (401, 403):
            fix = ("give a token that may read %s in model_weights_hub_token (kept in a vault), or accept the "
                   "model's licence on the hub with that account" % self.repo)
        elif error.code == 404:
            fix = ("check model_weights_hub_repo (%s) and model_weights_hub_revision (%s) against the hub's page "
                   "for the model" % (self.repo, self.revision))
        else:
            fix = "retry later, or fill the folder from the controller (model_weights_source: controller)"
        return "%s refused %s: HTTP %s %s. Fix: %s" % (self.endpoint, what, error.code, error.reason, fix)

    def listing(self):
        """(commit, [HubFile]) of the repository at the revision."""
        commit, files = self.modelscope_files() if self.source == "modelscope" else self.hf_files()
        if not files:
            raise DownloadError("%s lists no file in %s at %s. Fix: check model_weights_hub_repo and "
                                "model_weights_hub_revision" % (self.endpoint, self.repo, self.revision))
        seen = set()
        for hub_file in files:
            if hub_file.path in seen:
                raise DownloadError("%s lists %s twice. Fix: check model_weights_hub_endpoint" % (
                    self.endpoint, hub_file.path))
            seen.add(hub_file.path)
        return commit, files

    def hf_files(self):
        commit = self.revision
        if not COMMIT.fullmatch(commit):
            info, _next = self.get_json("%s/api/models/%s/revision/%s" % (
                self.endpoint, self.repo, quote(commit, safe="")), "revision %s of %s" % (commit, self.repo))
            commit = info.get("sha") if isinstance(info, dict) else None
            if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
                raise DownloadError("%s gave no commit for revision %s of %s. Fix: pin model_weights_hub_revision "
                                    "to a commit (40 hex digits, from the model's 'Files and versions' page)"
                                    % (self.endpoint, self.revision, self.repo))
        url = "%s/api/models/%s/tree/%s?recursive=true" % (self.endpoint, self.repo, commit)
        files, pages = [], set()
        while url:
            if url in pages or len(pages) >= LISTING_MAX_PAGES:
                raise DownloadError("%s sends its listing of %s in pages without end (%d pages, back to %s). Fix: "
                                    "check model_weights_hub_endpoint" % (self.endpoint, self.repo, len(pages), url))
            pages.add(url)
            page, following = self.get_json(url, "the files of %s at %s" % (self.repo, commit))
            if not isinstance(page, list):
                raise DownloadError("%s listed the files of %s as %s, not a list. Fix: check "
                                    "model_weights_hub_endpoint" % (self.endpoint, self.repo, type(page).__name__))
            for entry in page:
                if isinstance(entry, dict) and entry.get("type") == "directory":
                    continue
                lfs = entry.get("lfs") if isinstance(entry, dict) else None
                if isinstance(lfs, dict):
                    algorithm, digest = "sha256", lfs.get("oid")
                else:
                    algorithm, digest = "git-sha1", entry.get("oid") if isinstance(entry, dict) else None
                name = entry.get("path") if isinstance(entry, dict) else None
                download_url = "%s/%s/resolve/%s/%s" % (self.endpoint, self.repo, commit, quote(str(name)))
                size = entry.get("size") if isinstance(entry, dict) else None
                files.append(self.hub_file(name, size, algorithm, digest, download_url))
            if following and urlsplit(following).netloc != urlsplit(self.endpoint).netloc:
                raise DownloadError("%s sent the next page of its listing to another host (%s). Fix: check "
                                    "model_weights_hub_endpoint" % (self.endpoint, urlsplit(following).netloc))
            url = following
            self.check_count(files)
        return commit, files

    def modelscope_files(self):
        answer, _next = self.get_json("%s/api/v1/models/%s/repo/files?Revision=%s&Recursive=True" % (
            self.endpoint, self.repo, quote_plus(self.revision)), "the files of %s at %s" % (self.repo, self.revision))
        data = answer.get("Data") if isinstance(answer, dict) else None
        entries = data.get("Files") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            message = answer.get("Message") if isinstance(answer, dict) else None
            raise DownloadError("%s did not list the files of %s at %s%s. Fix: check model_weights_hub_repo and "
                                "model_weights_hub_revision" % (self.endpoint, self.repo, self.revision,
                                                                ": %s" % message if message else ""))
        files = []
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("Type") == "tree" or entry.get("Name") in SKIPPED:
                continue
            name = entry.get("Path")
            files.append(self.hub_file(name, entry.get("Size"), "sha256", entry.get("Sha256"),
                                       "%s/api/v1/models/%s/repo?Revision=%s&FilePath=%s" % (
                                           self.endpoint, self.repo, quote_plus(self.revision),
                                           quote_plus(str(name)))))
            self.check_count(files)
        return self.revision, files

    def hub_file(self, name, size, algorithm, digest, url):
        problem = path_problem(name)
        if problem:
            raise DownloadError("%s lists a file %s. Fix: check model_weights_hub_endpoint; nothing was written"
                                % (self.endpoint, problem))
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise DownloadError("%s lists %s with size %r, not a number of bytes. Fix: check "
                                "model_weights_hub_endpoint" % (self.endpoint, name, size))
        if not (isinstance(digest, str) and DIGESTS[algorithm].fullmatch(digest)):
            raise DownloadError("%s lists %s with no %s checksum (%r), so it cannot be verified. Fix: check "
                                "model_weights_hub_endpoint" % (self.endpoint, name, algorithm, digest))
        return HubFile(name, size, algorithm, digest, url)

    def check_count(self, files):
        if len(files) > LISTING_MAX_FILES:
            raise DownloadError("%s lists more than %d files in %s, more than any model has. Fix: check "
                                "model_weights_hub_repo" % (self.endpoint, LISTING_MAX_FILES, self.repo))


def reason(error):
    return str(getattr(error, "reason", None) or error) or type(error).__name__


def digest_of(algorithm, path, size):
    """The checksum of a file as the hub computes it: sha256 of the content, or git's blob sha1."""
    if algorithm == "git-sha1":
        hasher = hashlib.sha1(b"blob %d\0" % size)
    else:
        hasher = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            hasher.update(block)
    return hasher.hexdigest()


class Folder(object):
    """The model folder: its files, the record of what was verified in it, and the parts of unfinished downloads."""

    def __init__(self, path):
        self.path = path
        self.parts = os.path.join(path, PARTS)
        self.record_path = os.path.join(path, RECORD)

    def read_record(self):
        try:
            with open(self.record_path) as stream:
                record = json.load(stream)
        except (OSError, ValueError, RecursionError):
            return {}
        return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else {}

    def write_record(self, record):
        """Replaces the record whole, so an interrupted run leaves the old one or the new one, never half of one."""
        staged = self.record_path + ".new"
        with open(staged, "w") as stream:
            json.dump(record, stream, indent=1, sort_keys=True)
        os.chmod(staged, 0o644)
        os.replace(staged, self.record_path)

    def unchanged(self, name, recorded):
        """Whether name is as it was when its checksum was verified (same size and modification time)."""
        try:
            stat = os.stat(os.path.join(self.path, name))
        except OSError:
            return False
        return isinstance(recorded, dict) and recorded.get("size") == stat.st_size and recorded.get(
            "mtime_ns") == stat.st_mtime_ns

    def part_of(self, hub_file):
        # Named by the content it will hold: a short, flat name whatever the path, and a part left by an earlier
        # revision's other content is never resumed into this one.
        return os.path.join(self.parts, "%s-%s.part" % (hub_file.algorithm, hub_file.digest))

    def target(self, name):
        """Where the repository's file name goes: inside the folder, through no link that leads elsewhere."""
        target = os.path.join(self.path, name)
        inside = os.path.realpath(self.path)
        if not os.path.realpath(target).startswith(inside + os.sep):
            raise DownloadError("%s leads outside the model folder %s (through a link on the way). Fix: remove the "
                                "link, or point fleet_model_dir at a folder without one" % (target, self.path))
        return target


class Download(object):
    """Makes the folder hold every file the hub lists, each verified; collects what the module returns."""

    def __init__(self, params, check_mode):
        self.params, self.check_mode = params, check_mode
        self.folder = Folder(params["path"])
        self.hub = Hub(params)
        self.result = dict(changed=False, commit="", files=0, downloaded=[], resumed=[], refetched=[], removed=[],
                           bytes=0, hub_asked=False)

    def identity(self):
        return {"source": self.params["source"], "endpoint": self.hub.endpoint, "repo": self.params["repo"],
                "revision": self.params["revision"]}

    def run(self):
        record = self.folder.read_record()
        if all(record.get(key) == value for key, value in self.identity().items()) and record.get("complete") and all(
                self.folder.unchanged(name, recorded) for name, recorded in record["files"].items()):
            self.result.update(commit=record.get("commit", ""), files=len(record["files"]))
            return self.result
        self.result["hub_asked"] = True
        commit, files = self.hub.listing()
        self.result.update(commit=commit, files=len(files))
        known = record.get("files", {}) if record.get("repo") == self.params["repo"] else {}
        missing = [hub_file for hub_file in files if not self.verified(hub_file, known.get(hub_file.path))]
        self.result["downloaded"] = [hub_file.path for hub_file in missing]
        # Files an earlier revision had and this one has not: this module put them there, so it takes them away.
        listed = {hub_file.path for hub_file in files}
        self.result["removed"] = sorted(name for name in known if name not in listed and path_problem(name) is None
                                        and os.path.isfile(os.path.join(self.folder.path, name)))
        self.result["changed"] = bool(missing or self.result["removed"])
        if self.check_mode:
            return self.result
        make_folder(self.folder.path)
        # The record grows with every file put in place, so a run stopped after hours keeps what it verified.
        verified = {hub_file.path: self.recorded(hub_file) for hub_file in files if hub_file not in missing}
        for hub_file in missing:
            self.fetch(hub_file)
            verified[hub_file.path] = self.recorded(hub_file)
            self.folder.write_record(dict(self.identity(), commit=commit, files=verified, complete=False))
        for name in self.result["removed"]:
            os.unlink(self.folder.target(name))
        self.folder.write_record(dict(self.identity(), commit=commit, files=verified, complete=True))
        if os.path.isdir(self.folder.parts) and not os.listdir(self.folder.parts):
            os.rmdir(self.folder.parts)
        return self.result

    def recorded(self, hub_file):
        return hub_file.record(os.stat(os.path.join(self.folder.path, hub_file.path)))

    def verified(self, hub_file, recorded):
        """Whether the folder's copy of hub_file is the listed one; a copy that is not is noted for refetching."""
        target = self.folder.target(hub_file.path)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise DownloadError("%s is not a file, where the hub lists the file %s. Fix: move it away, and run again"
                                % (target, hub_file.path))
        try:
            size = os.path.getsize(target)
        except OSError:
            return False
        if self.folder.unchanged(hub_file.path, recorded) and recorded.get("digest") == hub_file.digest:
            return True
        if size == hub_file.size:
            found = digest_of(hub_file.algorithm, target, size)
            if found == hub_file.digest:
                return True
            why = "%s %s is not the listed %s" % (hub_file.algorithm, found[:12], hub_file.digest[:12])
        else:
            why = "%d bytes, not the listed %d" % (size, hub_file.size)
        self.result["refetched"].append("%s (on disk: %s)" % (hub_file.path, why))
        return False

    def fetch(self, hub_file):
        """Downloads hub_file into its part, resuming what is there, until its checksum matches; then puts it in
        place in one rename, so the folder never holds a file that was not verified."""
        part = self.folder.part_of(hub_file)
        if not os.path.isdir(self.folder.parts):
            os.makedirs(self.folder.parts, 0o700)  # parts are nobody's but this module's
        errors = []
        for attempt in range(1, self.params["retries"] + 1):
            try:
                self.receive(hub_file, part)
            except (URLError, HTTPException, OSError, DownloadError) as error:
                if isinstance(error, HTTPError) and error.code in (401, 403, 404):
                    raise DownloadError(self.hub.refusal(error, hub_file.path)) from None
                errors.append(str(error) if isinstance(error, DownloadError) else reason(error))
                time.sleep(attempt if attempt < self.params["retries"] else 0)
                continue
            found = digest_of(hub_file.algorithm, part, hub_file.size)
            if found == hub_file.digest:
                target = self.folder.target(hub_file.path)
                if os.path.dirname(hub_file.path):
                    make_folder(os.path.dirname(target))
                os.chmod(part, 0o644)
                os.replace(part, target)
                return
            os.unlink(part)
            errors.append("%s %s is not the listed %s" % (hub_file.algorithm, found[:12], hub_file.digest[:12]))
            self.result["refetched"].append("%s (received: %s)" % (hub_file.path, errors[-1]))
        raise DownloadError("could not download %s from %s in %d attempts; last: %s. Fix: retry (what arrived is "
                            "kept and resumed), or fill the folder from the controller (model_weights_source: "
                            "controller)" % (hub_file.path, self.hub.endpoint, self.params["retries"], errors[-1]))

    def receive(self, hub_file, part):
        """Appends to part what the hub sends after the bytes part already has, never beyond the listed size."""
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if have >= hub_file.size:
            if have > hub_file.size:
                os.unlink(part)
                have = 0
            elif hub_file.size:
                return
        with self.hub.request(hub_file.url, offset=have) as answer:
            ranged = have and answer.status == 206 and (answer.headers.get("Content-Range") or "").startswith(
                "bytes %d-" % have)
            if have and ranged:
                self.result["resumed"].append(hub_file.path)
            elif have:
                have = 0  # the hub sent the whole file again, as a hub does for a file it cannot serve in ranges
            with open(part, "ab" if have else "wb") as stream:
                while True:
                    block = answer.read(min(CHUNK, hub_file.size - have + 1))
                    if not block:
                        break
                    have += len(block)
                    self.result["bytes"] += len(block)
                    if have > hub_file.size:
                        stream.truncate(hub_file.size)
                        raise DownloadError("%s sent more than the %d bytes it lists for %s" % (
                            self.hub.endpoint, hub_file.size, hub_file.path))
                    stream.write(block)
        if have < hub_file.size:
            raise DownloadError("the download of %s stopped at %d of %d bytes" % (hub_file.path, have, hub_file.size))


def make_folder(path):
    """A folder everyone may read, as the model's files are, whatever the umask of the connection."""
    if not os.path.isdir(path):
        os.makedirs(path)
        os.chmod(path, 0o755)


def check_options(params):
    for option in ("repo", "revision"):
        text_given(params, option, "the model's %s on the hub" % option, "set model_weights_hub_%s" % option)
    if path_problem(params["repo"]) or params["repo"].count("/") != 1:
        raise OptionError("repo %r: expected <owner>/<name>, as in Qwen/Qwen3-VL-8B-Instruct. Fix: set "
                          "model_weights_hub_repo" % params["repo"])
    if not os.path.isabs(params["path"]):
        raise OptionError("path %r: expected an absolute path. Fix: set fleet_model_dir to one" % params["path"])
    endpoint = params["endpoint"]
    if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
        raise OptionError("endpoint %r: expected an http:// or https:// address. Fix: set model_weights_hub_endpoint "
                          "to the hub's address, or leave it empty for %s's own" % (endpoint, params["source"]))
    number_at_least(params, "retries", 1, "set model_weights_hub_retries to 1 or more")
    for name in params["required"]:
        problem = path_problem(name)
        if problem:
            raise OptionError("required names %s: expected file names inside path, such as config.json. Fix: correct "
                              "model_weights_required_files" % problem)
    if not (math.isfinite(params["timeout"]) and params["timeout"] > 0):
        raise OptionError("timeout %r: expected more than 0 seconds. Fix: set model_weights_hub_timeout"
                          % params["timeout"])


def lacking(path, required):
    """The required files (names inside the folder) that are not there or are empty."""
    return [name for name in required
            if not os.path.isfile(os.path.join(path, name)) or os.path.getsize(os.path.join(path, name)) == 0]


def download(params, check_mode):
    """The module's result once the folder holds every file of the repository at the revision, each verified, and
    every required file (in check mode: what a run would fetch)."""
    check_options(params)
    socket.setdefaulttimeout(params["timeout"])
    result = Download(params, check_mode).run()
    missing = [] if check_mode else lacking(params["path"], params["required"])
    if missing:
        raise DownloadError(
            "model folder %s holds %s at %s whole, but not %s: found the repository without them; required every "
            "file the server needs. Fix: set model_weights_hub_repo to the model's own repository, or correct "
            "model_weights_required_files" % (params["path"], params["repo"], params["revision"], ", ".join(missing)))
    return result
