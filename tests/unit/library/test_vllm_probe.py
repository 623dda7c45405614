"""library/vllm_probe.py on options it cannot use and on answers no vLLM server gives, from a tiny local server
whose answers each test scripts (tests/fake_vllm.py's Scripted; test_vllm_benchmark.py streams from it too); and
its timeout, which bounds the whole probe, against a Docker CLI that hangs and a server that trickles."""
import json
import time

import pytest
from fake_vllm import MODEL, Scripted, scripted, serving  # noqa: F401  (the fixture)
from module_runs import SECRET, SHORT_DOCKER_TIMEOUT, assert_refused, run_module

from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases
from conftest import free_port


def probe(**args):
    """The probe's result; a closed port and a 1 s wait unless args say otherwise, so nothing waits long. The
    scripted answers here are about their shape, not what the model says (the answer check has tests of its own)."""
    base = {"base_url": "http://127.0.0.1:%d" % free_port(), "model": MODEL, "timeout": 1, "image_size": "32x24",
            "answer_check": "none"}
    return run_module("vllm_probe", **dict(base, **args))


OPTIONS = [
    ("base_url without scheme", {"base_url": "localhost:8000"}, ["base_url 'localhost:8000'", "http://host:port"]),
    ("base_url empty", {"base_url": ""}, ["base_url ''", "http://host:port"]),
    ("base_url port out of range", {"base_url": "http://127.0.0.1:99999"}, ["base_url 'http://127.0.0.1:99999'",
                                                                             "port"]),
    ("base_url port not a number", {"base_url": "http://127.0.0.1:http"}, ["base_url 'http://127.0.0.1:http'",
                                                                            "port"]),
    ("model empty", {"model": ""}, ["model is empty", "served model name"]),
    ("model blank", {"model": "  "}, ["model is empty", "served model name"]),
    ("timeout zero", {"timeout": 0}, ["timeout: 0 is not allowed", "at least 1"]),
    ("timeout negative", {"timeout": -1}, ["timeout: -1 is not allowed", "at least 1"]),
    ("log_lines negative", {"log_lines": -1}, ["log_lines: -1 is not allowed", "at least 0"]),
    ("max_tokens zero", {"max_tokens": 0}, ["max_tokens: 0 is not allowed", "at least 1"]),
    ("request_timeout zero", {"request_timeout": 0}, ["request_timeout: 0 is not allowed", "at least 1"]),
    ("image_size without height", {"image_size": "640"}, ["image_size", "'640'", "WIDTHxHEIGHT"]),
    ("image_size zero wide", {"image_size": "0x480"}, ["image_size", "'0x480'", "WIDTHxHEIGHT"]),
    ("image_size with depth", {"image_size": "640x480x3"}, ["image_size", "WIDTHxHEIGHT"]),
    ("image_size empty", {"image_size": ""}, ["image_size", "WIDTHxHEIGHT"]),
    ("image_size too large", {"image_size": "99999x99999"}, ["image_size", "'99999x99999'", "8192x8192"]),
    ("container an option", {"container": "-x"}, ["container '-x'", "a container name"]),
    ("container with a space", {"container": "vllm ascend"}, ["container 'vllm ascend'", "a container name"]),
    ("docker empty", {"container": "vllm-ascend", "docker": ""}, ["docker is empty", "the Docker CLI"]),
    ("docker missing", {"container": "vllm-ascend", "docker": "/nonexistent/docker"},
     ["docker '/nonexistent/docker'", "cannot run"]),
    ("required_files without container", {"required_files": ["/usr/lib/libjemalloc.so.2"]},
     ["required_files: needs container"]),
    ("required_files relative", {"container": "vllm-ascend", "required_files": ["libjemalloc.so.2"]},
     ["required_files: 'libjemalloc.so.2' is not an absolute path"]),
    ("api_key with a line break", {"api_key": SECRET + "\nX-Injected: 1"}, ["api_key", "line break"]),
    ("api_key not ASCII", {"api_key": SECRET + "ключ"}, ["api_key", "ASCII"]),
]


@pytest.mark.parametrize("case,args,expected", OPTIONS, ids=[row[0] for row in OPTIONS])
def test_options_it_cannot_use_are_refused(case, args, expected):
    result = probe(**args)
    assert_refused(result, *expected)
    assert SECRET not in json.dumps(result)


@pytest.mark.parametrize("case,answer,expected", [
    ("HTTP 500", (500, b'{"error": {"message": "boom"}}'), ["answered HTTP 500", "boom"]),
    ("not JSON", (200, b"<html>proxy error</html>"), ["not a chat completion", "proxy error"]),
    ("a JSON list", (200, b"[1, 2]"), ["not a chat completion"]),
    ("choices a string", (200, b'{"choices": "a picture", "usage": {}}'), ["no choices[0].message.content"]),
    ("choices holding null", (200, b'{"choices": [null], "usage": {}}'), ["no choices[0].message.content"]),
    ("message a string", (200, b'{"choices": [{"message": "a picture"}], "usage": {}}'),
     ["no choices[0].message.content"]),
    ("content a number", (200, b'{"choices": [{"message": {"content": 5}}], "usage": {}}'),
     ["no choices[0].message.content"]),
    ("content empty", (200, b'{"choices": [{"message": {"content": " "}}], "usage": {}}'), ["an empty answer"]),
    ("usage missing", (200, b'{"choices": [{"message": {"content": "a picture"}}]}'), ["no usage block"]),
    ("usage a list", (200, b'{"choices": [{"message": {"content": "a picture"}}], "usage": [3]}'),
     ["no usage block"]),
])
def test_a_smoke_answer_no_vllm_gives_is_named(scripted, case, answer, expected):  # noqa: F811
    Scripted.chat = answer
    result = probe(base_url=scripted)
    assert_refused(result, scripted, "the image request", *expected)
    assert Scripted.chats == 1 and result["models"] == [MODEL]


@pytest.mark.parametrize("case,models,expected", [
    ("not JSON", (200, b"It works!"), ["/v1/models answered 200", "It works!", "not " + MODEL]),
    ("data not a list", (200, b'{"data": "Qwen3-VL-8B-Instruct"}'), ["/v1/models answered 200", "not " + MODEL]),
    ("ids that are not names", (200, b'{"data": [{"id": 5}, {"name": "x"}, 7]}'), ["not " + MODEL]),
])
def test_a_models_list_no_vllm_gives_is_named(scripted, case, models, expected):  # noqa: F811
    Scripted.models = models
    assert_refused(probe(base_url=scripted), scripted, "not ready after 1s", *expected)


def test_a_refused_key_fails_at_once_not_at_the_timeout(scripted):  # noqa: F811
    """vLLM answers /health without the key and 401 on /v1/*: waiting longer cannot help."""
    Scripted.models = (401, b'{"error":"Unauthorized"}')
    started = time.monotonic()
    result = probe(base_url=scripted, timeout=600, api_key=SECRET)
    assert_refused(result, scripted, "the server refuses the API key: /v1/models answered 401", "Unauthorized",
                   "fleet_api_key")
    assert time.monotonic() - started < 300, "the probe waited for the ready timeout"
    assert SECRET not in json.dumps(result)


def fake_docker(tmp_path, state, has_file=True):
    """A docker CLI for the probe's container checks: inspect answers `state` (status, exit code, restart count,
    read from a file a test may rewrite), exec answers whether the file exists."""
    (tmp_path / "state").write_text(state)
    script = tmp_path / "docker"
    script.write_text("#!/bin/sh\ncase \"$1\" in\n  inspect) cat %s ;;\n  exec) exit %d ;;\n  logs) echo crashed ;;\n"
                      "esac\n" % (tmp_path / "state", 0 if has_file else 1))
    script.chmod(0o755)
    return str(script)


def test_a_container_restarted_while_loading_is_a_restart_loop(scripted, tmp_path):  # noqa: F811
    """Docker restarts a crashed server at once: it is running each time the probe looks, one restart later."""
    Scripted.models = (503, b"loading")
    docker = fake_docker(tmp_path, "running 0 0")
    restarted = tmp_path / "docker-restarting"
    restarted.write_text("#!/bin/sh\nif [ \"$1\" = inspect ] && [ -e %(seen)s ]; then echo 'running 0 1'; exit 0; fi\n"
                         "[ \"$1\" = inspect ] && : > %(seen)s\nexec %(docker)s \"$@\"\n"
                         % {"seen": tmp_path / "seen", "docker": docker})
    restarted.chmod(0o755)
    result = probe(base_url=scripted, timeout=30, container="vllm-ascend", docker=str(restarted), smoke_test=False)
    assert_refused(result, "crashed and was restarted by Docker 1 time(s) while loading", "restart loop", "crashed")


def test_a_file_the_deploy_expects_in_the_container_is_checked_with_the_smoke_request(scripted, tmp_path):  # noqa: F811
    Scripted.chat = (200, json.dumps({"choices": [{"message": {"content": "a picture"}}],
                                      "usage": {"prompt_tokens": 3}}).encode())
    path = "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"
    present = probe(base_url=scripted, container="vllm-ascend", docker=fake_docker(tmp_path, "running 0 0"),
                    required_files=[path])
    assert not present.get("failed") and present["answer"] == "a picture", present
    missing = probe(base_url=scripted, container="vllm-ascend",
                    docker=fake_docker(tmp_path, "running 0 0", has_file=False), required_files=[path])
    assert_refused(missing, path + " is not in the container", "vllm_server_jemalloc_path")


def test_a_docker_inspect_that_hangs_ends_the_wait_naming_the_daemon(scripted, tmp_path):  # noqa: F811
    hung = tmp_path / "docker"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    result = run_module("vllm_probe", prepare=SHORT_DOCKER_TIMEOUT,
                        base_url=scripted, model=MODEL, timeout=30, image_size="32x24", container="vllm-ascend",
                        docker=str(hung), log_lines=0, answer_check="none")
    assert result.get("failed") and "`docker inspect` of container vllm-ascend no end after 1s" in result["msg"], (
        result)


def test_a_key_read_from_its_env_file_is_masked_when_the_server_echoes_it(scripted, tmp_path):  # noqa: F811
    env_file = tmp_path / "vllm-ascend.env"
    env_file.write_text("VLLM_API_KEY=%s\n" % SECRET)
    Scripted.chat = (500, json.dumps({"error": {"message": "bad key %s in request" % SECRET}}).encode())
    result = probe(base_url=scripted, env_file=str(env_file), timeout=5)
    assert result.get("failed") and "HTTP 500" in result["msg"], result
    assert SECRET not in json.dumps(result)


def test_a_docker_inspect_that_hangs_ends_the_probe_at_its_timeout_naming_the_call(scripted, tmp_path):  # noqa: F811
    """Each Docker call is bounded on its own (two minutes); the timeout bounds their sum. The stand-in hangs for
    20 s, so that the test ends soon even where the probe waits for it."""
    hung = tmp_path / "docker"
    hung.write_text("#!/bin/sh\nexec sleep 20\n")
    hung.chmod(0o755)
    started = time.monotonic()
    result = probe(base_url=scripted, timeout=3, container="vllm-ascend", docker=str(hung))
    elapsed = time.monotonic() - started
    assert_refused(result, "not ready after 3s: the time ran out while waiting for `%s inspect" % hung,
                   "-- vllm-ascend`", "systemctl status docker")
    assert elapsed < 12, "the probe took %.1f s with timeout 3" % elapsed


class Trickling(Scripted):
    """A Scripted server, ready at once, that answers its first `quick` chat requests whole and at once, and the next
    a byte every TRICKLE_S, each read well within a per-read timeout (the whole answer in about 15 s)."""

    quick = 0
    chats = 0
    ANSWER = json.dumps({"choices": [{"message": {"content": "a picture of squares"}}], "usage": {}}).encode()
    TRICKLE_S = 0.25

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).chats += 1
        if self.chats <= self.quick:
            return self.answer(200, self.ANSWER)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.ANSWER)))
        self.end_headers()
        for position in range(len(self.ANSWER)):
            self.wfile.write(self.ANSWER[position:position + 1])
            self.wfile.flush()
            time.sleep(self.TRICKLE_S)


@pytest.mark.parametrize("quick,answer_check,waiting_on", [
    (0, "none", "the image request's answer"),
    (1, "sane", "the answer to the answer check's question"),
], ids=["smoke request", "answer check"])
def test_a_server_that_trickles_its_answer_ends_the_probe_at_its_timeout(quick, answer_check, waiting_on):
    """request_timeout (300 s) bounds one answer; the timeout bounds the probe, questions and all."""
    Trickling.quick, Trickling.chats = quick, 0
    with serving(Trickling) as url:
        started = time.monotonic()
        result = probe(base_url=url, timeout=3, request_timeout=300, answer_check=answer_check)
        elapsed = time.monotonic() - started
    assert_refused(result, "the time ran out (timeout: 3s, the whole probe) while waiting for " + waiting_on)
    assert result["models"] == [MODEL] and Trickling.chats == quick + 1
    assert elapsed < 12, "the probe took %.1f s with timeout 3" % elapsed


def test_an_engine_that_dies_of_the_image_is_named_with_its_cause_before_the_log(scripted, tmp_path):  # noqa: F811
    """A release whose image requests kill its engine (the release table's #12086): the smoke request answers 500,
    and the failure names the IndexPut crash from the log's lines before showing them."""
    Scripted.chat = (500, json.dumps({"error": {"message": "EngineCore encountered an issue.",
                                                "type": "InternalServerError"}}).encode())
    lines = [defect["log"] for entry in vllm_releases.load()["releases"].values() for defect in entry["defects"]][0]
    log = tmp_path / "log"
    log.write_text("\n".join(["ERROR " + line for line in lines]
                             + ["ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."])
                   + "\n")
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\ncase \"$1\" in\n  inspect) echo 'running 0 0' ;;\n  logs) cat %s ;;\nesac\n" % log)
    docker.chmod(0o755)
    result = probe(base_url=scripted, container="vllm-ascend", docker=str(docker), timeout=30)
    assert result.get("failed") and "the image request answered HTTP 500" in result["msg"], result
    cause = result["msg"].split("\nCause, from the log: ", 1)[1].split("\n", 1)[0]
    assert cause.startswith("large_image_crash: ") and "507018" in cause and "engine_dead" not in cause, cause
    assert result["msg"].index("Cause, from the log") < result["msg"].index("--- last 40 lines of docker logs")
    # The same, as fields for a caller that reads them (the canary's image check).
    assert result["causes"] == [cause] and result["error"].startswith("the image request answered HTTP 500")
