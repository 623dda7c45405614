"""library/docker_image_pull.py on names, digests, numbers, Docker CLIs and docker answers it cannot use.

A fake docker logs every call, so a test counts the pull attempts: an error that retrying cannot fix (a bad name,
a tag the registry does not have, a login it needs) must stop at once, or fail before any pull.
"""
import json
import os
import sys

import pytest
from module_runs import SECRET, SHORT_DOCKER_TIMEOUT, assert_refused, run_module

IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
DIGEST = "sha256:" + "4f1c" * 16
PRESENT = json.dumps([{"Id": "sha256:" + "0f4a" * 16, "RepoDigests": ["quay.io/ascend/vllm-ascend@" + DIGEST]}])
NO_SUCH_IMAGE = "Error response from daemon: No such image: " + IMAGE


def fake_docker(tmp_path, inspect=(1, NO_SUCH_IMAGE), pull=(0, "Status: Downloaded newer image"), after_pull=None,
                password=None, engine="linux/amd64"):
    """A docker CLI that answers `image inspect` with inspect (after a pull that succeeded: after_pull, by default
    the image present), `pull` with pull, `version` with the engine's platform engine, and `login` as a registry
    whose password is password, and logs each
    call's arguments (a login: with the folder its --config names, and whether that folder exists at the pull
    that follows); returns (path, calls())."""
    log = tmp_path / "docker-calls.jsonl"
    answers = {"inspect": list(inspect), "pull": list(pull), "after_pull": list(after_pull or (0, PRESENT)),
               "password": password, "engine": engine}
    script = tmp_path / "docker"
    script.write_text(
        "#!%s\nimport json, os, sys\nanswers = json.loads(%r)\npulled = %r\nargs = sys.argv[1:]\n"
        "with open(%r, 'a') as log:\n    log.write(json.dumps(args + (['config exists'] if args[:1] == ['--config'] "
        "and os.path.isdir(args[1]) else [])) + '\\n')\n"
        "if args[:1] == ['--config']:\n    args = args[2:]\n"
        "if args[0] == 'version':\n    print(answers['engine'])\n    sys.exit(0)\n"
        "if args[0] == 'login':\n    right = sys.stdin.read() == answers['password']\n"
        "    print('Login Succeeded' if right else 'Error response from daemon: Get \"http://r/v2/\": unauthorized: "
        "incorrect username or password', file=sys.stdout if right else sys.stderr)\n    sys.exit(0 if right else 1)\n"
        "key = 'pull' if args[0] == 'pull' else ('after_pull' if os.path.exists(pulled) else 'inspect')\n"
        "code, text = answers[key]\n"
        "if key == 'pull' and code == 0:\n    open(pulled, 'w').close()\n"
        "sys.stdout.buffer.write(text.encode('utf-8', 'surrogateescape'))\nsys.exit(code)\n"
        % (sys.executable, json.dumps(answers), str(tmp_path / "pulled"), str(log)))
    script.chmod(0o755)

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return str(script), calls


def pulls(calls):
    return [call for call in calls() if "pull" in call[:3]]


# (case, arguments besides docker, pieces the message must hold)
REFUSED_BEFORE_ANY_CALL = [
    ("empty name", {"name": ""}, ["name is empty", "an image reference"]),
    ("name -x", {"name": "-x"}, ["name '-x'", "starts with '-'", "an image reference"]),
    ("name --all-tags", {"name": "--all-tags"}, ["name '--all-tags'", "starts with '-'"]),
    ("name with a space", {"name": "quay.io/ascend/vllm ascend:v1"}, ["'quay.io/ascend/vllm ascend:v1'",
                                                                      "white space"]),
    ("name with a newline", {"name": IMAGE + "\n"}, ["white space"]),
    ("name in capitals", {"name": "quay.io/Ascend/VLLM-Ascend:v1"}, ["'quay.io/Ascend/VLLM-Ascend:v1'", "lowercase"]),
    ("name with an empty tag", {"name": "quay.io/ascend/vllm-ascend:"}, ["'quay.io/ascend/vllm-ascend:'",
                                                                        "an image reference"]),
    ("name with two tags", {"name": IMAGE + ":v2"}, ["an image reference"]),
    ("name with a slash at the end", {"name": "quay.io/ascend/"}, ["an image reference"]),
    ("name too long", {"name": "quay.io/" + "a" * 300 + ":v1"}, ["255 characters"]),
    ("name with a short digest", {"name": "quay.io/ascend/vllm-ascend@sha256:abc"}, ["an image reference"]),
    ("name and digest disagree", {"name": "quay.io/ascend/vllm-ascend@" + DIGEST, "digest": "sha256:" + "0" * 64},
     ["names the digest " + DIGEST, "digest is sha256:" + "0" * 64]),
    ("digest too short", {"name": IMAGE, "digest": "sha256:abc"}, ["digest 'sha256:abc'", "64"]),
    ("digest of another algorithm", {"name": IMAGE, "digest": "md5:" + "0" * 32}, ["digest 'md5:", "sha256:"]),
    ("digest in capitals", {"name": IMAGE, "digest": "sha256:" + "AB" * 32}, ["digest 'sha256:ABAB", "lowercase"]),
    ("digest with a space", {"name": IMAGE, "digest": " " + DIGEST}, ["digest ' sha256:", "64"]),
    ("retries zero", {"name": IMAGE, "retries": 0}, ["retries: 0 is not allowed", "at least 1"]),
    ("retries negative", {"name": IMAGE, "retries": -3}, ["retries: -3 is not allowed", "at least 1"]),
    ("delay negative", {"name": IMAGE, "delay": -1}, ["delay: -1 is not allowed", "at least 0"]),
    ("delay not a number", {"name": IMAGE, "delay": "nan"}, ["delay: nan is not allowed", "at least 0"]),
    ("delay endless", {"name": IMAGE, "delay": "inf"}, ["delay: inf is not allowed", "at least 0"]),
    ("max_delay negative", {"name": IMAGE, "max_delay": -5}, ["max_delay: -5 is not allowed", "at least 0"]),
    ("timeout negative", {"name": IMAGE, "timeout": -1}, ["timeout: -1 is not allowed", "at least 0",
                                                          "vllm_image_pull_timeout"]),
    ("empty docker", {"name": IMAGE, "docker": ""}, ["docker is empty", "the Docker CLI"]),
]


@pytest.mark.parametrize("case,args,expected", REFUSED_BEFORE_ANY_CALL, ids=[row[0] for row in REFUSED_BEFORE_ANY_CALL])
def test_bad_options_fail_at_once_without_running_docker(tmp_path, case, args, expected):
    docker, calls = fake_docker(tmp_path)
    arguments = dict({"docker": docker, "delay": 0}, **args)
    result = run_module("docker_image_pull", **arguments)
    assert_refused(result, *expected)
    assert calls() == []
    assert "proxy, firewall, DNS" not in result["msg"]  # never blamed on the network


@pytest.mark.parametrize("case,output,expected", [
    ("tag not in the registry",
     "Error response from daemon: manifest for %s not found: manifest unknown: manifest unknown" % IMAGE,
     ["manifest unknown", "the tag"]),
    ("repository not in the registry",
     "Error response from daemon: pull access denied for quay.io/ascend/vllm-ascend, repository does not exist or "
     "may require 'docker login': denied: requested access to the resource is denied",
     ["vllm_image_registry_username"]),
    ("login needed", "Error response from daemon: Head \"https://quay.io/v2/x/manifests/v1\": unauthorized: "
                     "authentication required", ["unauthorized", "vllm_image_registry_username"]),
    ("no image for this machine", "no matching manifest for linux/arm64/v8 in the manifest list entries",
     ["no matching manifest", "architecture"]),
    ("docker rejects the name", "invalid reference format", ["invalid reference format", "name"]),
    ("an engine older than 20.10", "\"--platform\" is only supported on a Docker daemon with experimental features "
                                   "enabled", ["experimental", "daemon.json", "vllm_image_platform"]),
])
def test_errors_retrying_cannot_fix_are_not_retried(tmp_path, case, output, expected):
    docker, calls = fake_docker(tmp_path, pull=(1, output + "\n"))
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, retries=4, delay=0)
    assert_refused(result, IMAGE, "not retried", *expected)
    assert (len(pulls(calls)), result["attempts"]) == (1, 1)
    assert "proxy, firewall, DNS" not in result["msg"]


def test_a_network_error_is_retried_and_blamed_on_the_network(tmp_path):
    docker, calls = fake_docker(tmp_path, pull=(1, "Error response from daemon: Get \"https://quay.io/v2/\": "
                                                   "dial tcp 1.2.3.4:443: connect: connection refused\n"))
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, retries=3, delay=0)
    assert_refused(result, "could not pull %s after 3 attempts" % IMAGE, "proxy, firewall, DNS")
    assert len(pulls(calls)) == 3 and len(result["errors"]) == 3


def test_a_pull_that_hangs_is_stopped_at_its_timeout_and_tried_again(tmp_path):
    """A pull stuck on a dead connection never ends by itself: each attempt has a time limit."""
    docker, calls = fake_docker(tmp_path)
    real = tmp_path / "docker-real"
    (tmp_path / "docker").rename(real)
    hang_once = tmp_path / "docker"
    hang_once.write_text("#!/bin/sh\nif [ \"$1\" = pull ] && [ ! -e %s ]; then : > %s; exec sleep 60; fi\n"
                         "exec %s \"$@\"\n" % (tmp_path / "hung", tmp_path / "hung", real))
    hang_once.chmod(0o755)
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, retries=3, delay=0, timeout=1)
    assert result.get("changed") and not result.get("failed"), result
    assert result["attempts"] == 2 and len(pulls(calls)) == 1, "the hung attempt, then one that pulled"


def test_a_daemon_that_does_not_answer_is_named_not_the_network(tmp_path):
    down = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"
    docker, calls = fake_docker(tmp_path, inspect=(1, down), pull=(1, down))
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, retries=2, delay=0)
    assert_refused(result, "Docker daemon", "systemctl start docker")
    assert "proxy, firewall, DNS" not in result["msg"]


@pytest.mark.parametrize("case,docker,expected", [
    ("no such program", "/nonexistent/bin/docker", ["docker '/nonexistent/bin/docker'", "cannot run"]),
    ("a folder", "{tmp}", ["docker '{tmp}'", "cannot run"]),
])
def test_a_docker_cli_that_cannot_run_is_named(tmp_path, case, docker, expected):
    docker = docker.replace("{tmp}", str(tmp_path))
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0)
    assert_refused(result, *[piece.replace("{tmp}", str(tmp_path)) for piece in expected])
    assert "attempts" not in result or result["attempts"] == 0


@pytest.mark.parametrize("case,inspect,expected", [
    ("not JSON", (0, "Id: sha256:0f4a"), ["docker image inspect", "not the JSON"]),
    ("an empty list", (0, "[]"), ["docker image inspect", "not the JSON"]),
    ("a list of strings", (0, '["sha256:0f4a"]'), ["docker image inspect", "not the JSON"]),
    ("not UTF-8", (0, "[\udcff]"), ["docker image inspect", "not the JSON"]),
])
def test_an_inspect_answer_that_is_no_image_description_is_named(tmp_path, case, inspect, expected):
    docker, _calls = fake_docker(tmp_path, inspect=inspect)
    assert_refused(run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0), *expected)


def test_a_pull_that_leaves_no_image_says_so(tmp_path):
    docker, calls = fake_docker(tmp_path, after_pull=(1, NO_SUCH_IMAGE))
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0)
    assert_refused(result, "docker pull", IMAGE, "no image")
    assert len(pulls(calls)) == 1


def test_every_name_docker_is_given_follows_the_end_of_its_options(tmp_path):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0)
    assert result["changed"] is True and result["attempts"] == 1
    assert calls() == [["image", "inspect", "--", IMAGE], ["pull", "--", IMAGE], ["image", "inspect", "--", IMAGE]]


def test_check_mode_says_what_a_real_run_would_do_where_docker_is_not_installed_yet(tmp_path):
    # In a check run the docker_runtime role before this one installs nothing, so there may be no docker yet.
    result = run_module("docker_image_pull", name=IMAGE, docker="/nonexistent/bin/docker",
                        _ansible_check_mode=True)
    assert "failed" not in result and result["changed"] is True and result["attempts"] == 0
    assert result["msg"].startswith("would pull %s" % IMAGE) and "/nonexistent/bin/docker" in result["msg"]
    # Bad input is bad in check mode too.
    assert_refused(run_module("docker_image_pull", name="-x", _ansible_check_mode=True), "name '-x'")


def test_an_image_inspect_that_hangs_ends_with_the_daemon_named(tmp_path):
    """Every Docker CLI call has an end (docker_cli.DEFAULT_TIMEOUT_S, shortened here): a wedged daemon does not
    hold the module forever, and is named as the cause."""
    hung = tmp_path / "docker"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    result = run_module("docker_image_pull", prepare=SHORT_DOCKER_TIMEOUT,
                        name=IMAGE, docker=str(hung), retries=1, delay=0)
    assert_refused(result, "image inspect -- %s` no end after 1s" % IMAGE, "the Docker daemon does not answer",
                   "systemctl status docker")


@pytest.mark.parametrize("mirror", ["quay.nju.edu.cn/ascend/vllm-ascend:v0.18.0rc1-310p",  # a host for quay.io
                                    "m.daocloud.io/quay.io/ascend/vllm-ascend:v0.18.0rc1-310p",  # a prefix
                                    "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.18.0rc1-310p"])
def test_an_image_pulled_from_a_mirror_is_named_as_the_containers_run_it(tmp_path, mirror):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name=IMAGE, pull_from=mirror, docker=docker, delay=0)
    assert result["changed"] and result["pulled_from"] == mirror and result["attempts"] == 1, result
    assert [call for call in calls() if call[0] in ("pull", "tag")] == [["pull", "--", mirror],
                                                                       ["tag", "--", mirror, IMAGE]]


def test_an_image_already_named_is_not_pulled_from_any_mirror(tmp_path):
    """Switching mirrors changes nothing on a host that has the image: not the image, not its containers."""
    docker, calls = fake_docker(tmp_path, inspect=(0, PRESENT))
    result = run_module("docker_image_pull", name=IMAGE, pull_from="m.daocloud.io/quay.io/ascend/vllm-ascend:v1",
                        docker=docker)
    assert not result["changed"] and result["attempts"] == 0, result
    assert [call[0] for call in calls()] == ["image"]


def test_a_mirror_name_docker_would_refuse_is_named_with_its_variable(tmp_path):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name=IMAGE, pull_from="https://m.daocloud.io/quay.io/ascend/x:v1",
                        docker=docker)
    assert_refused(result, "pull_from 'https://m.daocloud.io/quay.io/ascend/x:v1'", "fleet_image_registry_mirror",
                   "fleet_image_pull_from")
    assert calls() == []


def test_a_name_pinned_by_digest_cannot_be_given_to_an_image_pulled_by_another_name(tmp_path):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name="quay.io/ascend/vllm-ascend@" + DIGEST,
                        pull_from="m.daocloud.io/quay.io/ascend/vllm-ascend:v1", docker=docker)
    assert_refused(result, "pins a digest", "vllm_image_digest")
    assert calls() == []


SWR = "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.18.0rc1-310p"


def test_a_registry_that_needs_a_login_is_pulled_from_logged_in_for_this_pull_alone(tmp_path):
    docker, calls = fake_docker(tmp_path, password=SECRET)
    result = run_module("docker_image_pull", name=IMAGE, pull_from=SWR, docker=docker, delay=0,
                        registry_username="ops", registry_password=SECRET)
    assert result["changed"] and result["pulled_from"] == SWR, result
    (login,) = [call for call in calls() if "login" in call]
    assert login[2:] == ["login", "--username", "ops", "--password-stdin", "--",
                         "swr.cn-south-1.myhuaweicloud.com", "config exists"], "the password is never on a command line"
    (pull,) = pulls(calls)
    assert pull == ["--config", login[1], "pull", "--", SWR, "config exists"], "the pull uses the login's folder"
    assert not os.path.exists(login[1]), "the login's folder (and the password in it) is gone after the pull"
    assert SECRET not in json.dumps(result) and SECRET not in json.dumps(calls())


def test_a_login_refused_stops_before_any_pull_and_keeps_nothing(tmp_path):
    docker, calls = fake_docker(tmp_path, password="the right one")
    result = run_module("docker_image_pull", name=IMAGE, pull_from=SWR, docker=docker, delay=0,
                        registry_username="ops", registry_password=SECRET)
    assert_refused(result, "could not log in to swr.cn-south-1.myhuaweicloud.com as ops",
                   "incorrect username or password", "vllm_image_registry_password")
    assert pulls(calls) == [] and SECRET not in json.dumps(result)
    (login,) = [call for call in calls() if "login" in call]
    assert not os.path.exists(login[1])


def test_no_login_without_an_account_and_a_password_alone_is_refused(tmp_path):
    docker, calls = fake_docker(tmp_path)
    assert run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0)["changed"]
    assert [call[0] for call in calls()] == ["image", "pull", "image"]
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, registry_password=SECRET)
    assert result["failed"] and "registry_username" in result["msg"] and SECRET not in json.dumps(result)


def test_the_login_keeps_its_credentials_in_its_own_file_not_in_a_helper(tmp_path):
    docker, calls = fake_docker(tmp_path, password=SECRET)
    # The fake docker shows the config the login found: it must name the registry, so no helper is looked for.
    script = tmp_path / "docker"
    script.write_text(script.read_text().replace(
        "if args[0] == 'version':\n    print(answers['engine'])\n    sys.exit(0)\n"
        "if args[0] == 'login':", "if args[0] == 'login':\n    print(open(os.path.join(sys.argv[2], "
        "'config.json')).read(), file=open(%r, 'w'))" % str(tmp_path / "config-seen")))
    run_module("docker_image_pull", name=IMAGE, pull_from=SWR, docker=docker, delay=0,
               registry_username="ops", registry_password=SECRET)
    assert json.loads((tmp_path / "config-seen").read_text()) == {
        "auths": {"swr.cn-south-1.myhuaweicloud.com": {}}}


def test_a_registry_that_cannot_be_reached_for_the_login_is_retried_and_blamed_on_the_network(tmp_path):
    docker, calls = fake_docker(tmp_path, password=SECRET)
    script = tmp_path / "docker"
    script.write_text(script.read_text().replace(
        "if args[0] == 'version':\n    print(answers['engine'])\n    sys.exit(0)\n"
        "if args[0] == 'login':", "if args[0] == 'login':\n    print('Error response from daemon: Get "
        "\"https://swr/v2/\": dial tcp: lookup swr: no such host', file=sys.stderr)\n    sys.exit(1)"))
    result = run_module("docker_image_pull", name=IMAGE, pull_from=SWR, docker=docker, delay=0, retries=3,
                        registry_username="ops", registry_password=SECRET)
    assert_refused(result, "could not log in to swr.cn-south-1.myhuaweicloud.com after 3 attempts", "no such host",
                   "proxy, firewall, DNS")
    assert len([call for call in calls() if "login" in call]) == 3 and pulls(calls) == []


@pytest.mark.parametrize("account", [{"registry_username": "ops", "registry_password": ""},
                                     {"registry_username": "", "registry_password": SECRET}])
def test_an_account_given_in_part_is_refused(tmp_path, account):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name=IMAGE, docker=docker, **account)
    assert_refused(result, "expected both, or neither", "vllm_image_registry_password")
    assert calls() == [] and SECRET not in json.dumps(result)


def image_of(architecture):
    return json.dumps([dict(json.loads(PRESENT)[0], Os="linux", Architecture=architecture)])


@pytest.mark.parametrize("engine, wanted, asked", [
    ("linux/amd64", "linux/arm64", ["--platform", "linux/arm64"]),  # the twin's Kunpeng hosts: an x86_64 engine
    ("linux/arm64", "linux/arm64", []),  # a real Kunpeng host
    ("linux/arm64", "linux/aarch64", []),  # the machine's name, which docker takes too
    ("Error: no such command", "linux/arm64", []),  # an engine that does not say: left to pull its own
])
def test_the_hosts_platform_is_asked_for_only_where_the_engine_would_pull_another(tmp_path, engine, wanted, asked):
    """An engine older than 20.10 takes --platform only with its experimental features: it is given where needed."""
    docker, calls = fake_docker(tmp_path, after_pull=(0, image_of("arm64")), engine=engine)
    result = run_module("docker_image_pull", name=IMAGE, platform=wanted, docker=docker)
    assert result["changed"] and result["platform"] == "linux/arm64", result
    assert pulls(calls) == [["pull"] + asked + ["--", IMAGE]]


def test_platform_host_is_this_hosts_own_as_its_kernel_names_it(tmp_path):
    """platform: host needs no gathered facts: an image of this machine's architecture is kept, another pulled
    again, and the pull asks the engine for this machine's platform where it would pull another."""
    machine = {"aarch64": "arm64", "x86_64": "amd64"}.get(os.uname().machine, os.uname().machine)
    other = "amd64" if machine == "arm64" else "arm64"
    docker, calls = fake_docker(tmp_path, inspect=(0, image_of(machine)))
    kept = run_module("docker_image_pull", name=IMAGE, platform="host", docker=docker)
    assert not kept["changed"] and kept["platform"] == "linux/" + machine and pulls(calls) == [], kept
    (tmp_path / "other").mkdir()
    docker, calls = fake_docker(tmp_path / "other", inspect=(0, image_of(other)), after_pull=(0, image_of(machine)),
                                engine="linux/" + other)
    pulled = run_module("docker_image_pull", name=IMAGE, platform="host", docker=docker)
    assert pulled["changed"] and pulls(calls) == [["pull", "--platform", "linux/" + machine, "--", IMAGE]]


def test_the_images_environment_is_told_whether_it_was_there_or_pulled(tmp_path):
    """The role reads which chip the image is built for (SOC_VERSION) from it, with no docker call of its own."""
    env = ["PATH=/usr/bin", "SOC_VERSION=ascend310p3"]
    described = json.dumps([dict(json.loads(PRESENT)[0], Config={"Env": env})])
    there = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(tmp_path, inspect=(0, described))[0])
    assert not there["changed"] and there["env"] == env, there
    (tmp_path / "pulled").mkdir()
    pulled = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(tmp_path / "pulled",
                                                                            after_pull=(0, described))[0])
    assert pulled["changed"] and pulled["env"] == env, pulled
    (tmp_path / "bare").mkdir()
    bare = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(tmp_path / "bare", inspect=(0, PRESENT))[0])
    assert bare["env"] == [], bare


def test_an_image_of_another_platform_on_the_host_is_pulled_again(tmp_path):
    docker, calls = fake_docker(tmp_path, inspect=(0, image_of("amd64")), after_pull=(0, image_of("arm64")))
    result = run_module("docker_image_pull", name=IMAGE, platform="linux/arm64/v8", docker=docker)
    assert result["changed"] and len(pulls(calls)) == 1, result
    (tmp_path / "again").mkdir()
    again = run_module("docker_image_pull", name=IMAGE, platform="linux/arm64/v8",
                       docker=fake_docker(tmp_path / "again", inspect=(0, image_of("arm64")))[0])
    assert not again["changed"] and again["platform"] == "linux/arm64", again


def test_a_mirror_that_serves_another_platform_is_named_with_the_fix(tmp_path):
    """A mirror that copied one platform of quay.io's multi-arch tag gives an amd64 image to an aarch64 host."""
    mirror = "registry.example.cn/ascend/vllm-ascend:v0.18.0rc1-310p"
    docker, calls = fake_docker(tmp_path, after_pull=(0, image_of("amd64")), engine="linux/arm64")
    result = run_module("docker_image_pull", name=IMAGE, pull_from=mirror, platform="linux/arm64", docker=docker)
    assert result.get("failed"), result
    for piece in (mirror + " was pulled but is an image for linux/amd64", "this host runs linux/arm64",
                  "registry.example.cn serves no linux/arm64 build", "fleet_image_registry_mirror",
                  "docker pull --platform linux/arm64 " + IMAGE, "vllm_image_offline_tarball"):
        assert piece in result["msg"], result["msg"]
    assert ["tag", "--", mirror, IMAGE] not in calls(), "the wrong image was given the containers' name"


@pytest.mark.parametrize("platform", ["arm64", "linux", "linux/arm64/v8/x", "--all-tags"])
def test_a_platform_docker_would_not_read_is_refused_before_any_call(tmp_path, platform):
    docker, calls = fake_docker(tmp_path)
    result = run_module("docker_image_pull", name=IMAGE, platform=platform, docker=docker)
    assert_refused(result, "platform %r" % platform, "os/architecture", "vllm_image_platform")
    assert calls() == []


def test_refresh_pulls_a_present_image_and_is_changed_only_when_the_tag_moved(tmp_path):
    """What an image archive's save asks: the tag as the registry serves it now, not a copy pulled long ago."""
    docker, calls = fake_docker(tmp_path, inspect=(0, PRESENT))
    same = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0, refresh=True)
    assert not same["changed"] and same["attempts"] == 1 and len(pulls(calls)) == 1, same
    assert run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0)["attempts"] == 0
    moved = json.dumps([{"Id": "sha256:" + "1b2c" * 16, "RepoDigests": []}])
    (tmp_path / "moved").mkdir()
    docker, calls = fake_docker(tmp_path / "moved", inspect=(0, PRESENT), after_pull=(0, moved))
    newer = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0, refresh=True)
    assert newer["changed"] and newer["image_id"] == "sha256:" + "1b2c" * 16, newer
    checked = run_module("docker_image_pull", name=IMAGE, docker=docker, delay=0, refresh=True,
                         _ansible_check_mode=True)
    assert not checked["changed"] and checked["attempts"] == 0


def test_an_image_built_for_another_chip_is_refused_found_or_pulled(tmp_path):
    """expect_env: what the vllm_image role asks of every image (SOC_VERSION, the chip it is built for)."""
    expected = {"expect_env": {"SOC_VERSION": "ascend310p"}, "expect_env_fix": "use the release's -310p tag"}

    def described(env):
        return json.dumps([dict(json.loads(PRESENT)[0], Config={"Env": env})])

    ours = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(
        tmp_path, inspect=(0, described(["SOC_VERSION=Ascend310P1"])))[0], **expected)
    assert not ours["changed"] and not ours.get("failed"), ours
    (tmp_path / "a2").mkdir()
    pulled = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(
        tmp_path / "a2", after_pull=(0, described(["PATH=/usr/bin", "SOC_VERSION=ascend910b1"])))[0], **expected)
    assert_refused(pulled, "%s is built for SOC_VERSION=ascend910b1; required SOC_VERSION starting with ascend310p"
                   % IMAGE, "Fix: use the release's -310p tag")
    (tmp_path / "bare").mkdir()
    bare = run_module("docker_image_pull", name=IMAGE, docker=fake_docker(tmp_path / "bare", inspect=(0, PRESENT))[0],
                      **expected)
    assert_refused(bare, "is built for no SOC_VERSION; required SOC_VERSION starting with ascend310p")
    (tmp_path / "check").mkdir()
    would = run_module("docker_image_pull", name=IMAGE, _ansible_check_mode=True,
                       docker=fake_docker(tmp_path / "check")[0], **expected)
    assert would["changed"] and not would.get("failed"), would


def test_an_expectation_that_names_no_value_is_refused(tmp_path):
    result = run_module("docker_image_pull", name=IMAGE, expect_env={"SOC_VERSION": ""},
                        docker=fake_docker(tmp_path, inspect=(0, PRESENT))[0])
    assert_refused(result, "expect_env SOC_VERSION", "such as SOC_VERSION: Ascend310P")
