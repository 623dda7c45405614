"""module_utils/vllm_instance.py against an in-process Docker CLI (tests/fake_docker.py): every transition of an
instance's life, and a replacement, a commit and a restore stopped at each Docker call, after which the next run
must leave the host whole."""
import os
import shlex
import stat

import pytest
from fake_docker import FakeDocker, Interrupted

from ansible_collections.ascend.fleet.plugins.module_utils import vllm_instance

IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
NAME = "vllm-ascend"
CHIPS = ["/dev/davinci0", "/dev/davinci1"]


def run_lines(dtype="float16", devices=CHIPS):
    return ([["docker", "run", "--detach", "--name", NAME], ["--restart", "unless-stopped"],
             ["--label", "ascend-vllm-fleet.instance=" + NAME], ["--label", "ascend-vllm-fleet.host=npu-a"]]
            + [["--device", "%s:%s" % (device, device)] for device in devices]
            + [["--", IMAGE], ["vllm", "serve", "/models/m"], ["--dtype", dtype]])


@pytest.fixture
def host(tmp_path):
    """A host's config folder with its salt, and its Docker."""
    (tmp_path / ".config-hash-salt").write_text("s3cret")
    return tmp_path, FakeDocker(images={IMAGE: "sha256:" + "1" * 64})


def instance(host, dtype="float16", devices=CHIPS, api_key="sk-key"):
    folder, docker = host
    files = vllm_instance.instance_files(str(folder), NAME)
    return vllm_instance.Instance("docker", NAME, files["script"], files["env_file"], run_lines(dtype, devices), IMAGE,
                                  api_key, str(folder / ".config-hash-salt"), "ascend-vllm-fleet", devices,
                                  comment="test instance", runner=docker)


def snapshot(host):
    """What an operator sees: containers (id, running) and every file of the config folder with its mode."""
    folder, docker = host
    files = {path.name: (path.read_text(), stat.S_IMODE(path.stat().st_mode)) for path in folder.iterdir()}
    return {name: (c["id"], c["running"]) for name, c in docker.containers.items()}, files


def serving(host, dtype="float16"):
    """A host serving the instance from dtype, committed."""
    result = vllm_instance.apply(instance(host, dtype), check_mode=False)
    assert result["action"] == "replace" and result["error"] is None
    assert vllm_instance.Instance.commit(instance(host, dtype)) is False, "a new instance sets nothing aside"
    return snapshot(host)


def test_a_new_instance_starts_with_its_files_and_a_second_run_keeps_it(host):
    folder, docker = host
    result = vllm_instance.apply(instance(host), check_mode=False)
    assert result == dict(action="replace", set_aside=False, recovered=False, files_changed=True, error=None,
                          changed=True)
    container = docker.containers[NAME]
    assert container["running"] and container["devices"] == CHIPS
    assert container["labels"]["ascend-vllm-fleet.config-hash"] == instance(host).spec_hash()
    assert stat.S_IMODE((folder / (NAME + ".sh")).stat().st_mode) == 0o750
    assert (folder / (NAME + ".env")).read_text() == "VLLM_API_KEY=sk-key\n"
    assert stat.S_IMODE((folder / (NAME + ".env")).stat().st_mode) == 0o600
    before = snapshot(host)
    again = vllm_instance.apply(instance(host), check_mode=False)
    assert again["action"] == "keep" and again["changed"] is False and again["files_changed"] is False
    assert snapshot(host) == before


def test_a_serving_instance_whose_script_was_edited_is_kept_and_its_files_written_again(host):
    """The decision (check mode) of a container serving from its spec, with its script changed by hand: kept, but
    the run changes its files, which is what sends the server phase on from its decision to its start step."""
    folder, docker = host
    vllm_instance.apply(instance(host), check_mode=False)
    script = folder / (NAME + ".sh")
    written = script.read_text()
    script.write_text(written + "# edited\n")
    decided = vllm_instance.apply(instance(host), check_mode=True)
    assert decided["action"] == "keep" and decided["files_changed"] is True and decided["changed"] is True
    assert script.read_text() == written + "# edited\n", "check mode writes nothing"
    applied = vllm_instance.apply(instance(host), check_mode=False)
    assert applied["action"] == "keep" and applied["files_changed"] is True and script.read_text() == written


def test_the_script_runs_what_the_module_ran(host):
    folder, docker = host
    vllm_instance.apply(instance(host), check_mode=False)
    script = (folder / (NAME + ".sh")).read_text()
    assert script.startswith("#!/bin/sh\n") and "# test instance\n" in script
    assert "docker rm -f %s && sh %s" % (NAME, folder / (NAME + ".sh")) in script
    assert "sk-key" not in script
    body = "\n".join(line for line in script.splitlines() if not line.startswith("#") and line != "set -e")
    assert shlex.split(body.replace("\\\n", " ")) == ["docker", "run"] + docker.containers[NAME]["argv"]


def test_the_hash_follows_the_spec_the_image_the_key_and_the_salt(host):
    folder, docker = host
    base = instance(host).spec_hash()
    assert instance(host, dtype="bfloat16").spec_hash() != base
    assert instance(host, api_key="other").spec_hash() != base
    docker.images[IMAGE] = "sha256:" + "2" * 64
    assert instance(host).spec_hash() != base, "a new image under the same tag replaces the container"
    docker.images[IMAGE] = "sha256:" + "1" * 64
    (folder / ".config-hash-salt").write_text("another host")
    assert instance(host).spec_hash() != base


def test_a_stopped_instance_is_started_and_a_changed_one_is_set_aside_until_committed(host):
    folder, docker = host
    first, _files = serving(host)
    docker.containers[NAME]["running"] = False
    assert vllm_instance.apply(instance(host), check_mode=False)["action"] == "start"
    assert docker.containers[NAME]["running"] and docker.containers[NAME]["id"] == first[NAME][0]

    result = vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    assert result["action"] == "replace" and result["set_aside"] is True and result["error"] is None
    aside = docker.containers[NAME + "-previous"]
    assert aside["id"] == first[NAME][0] and not aside["running"], "set aside stopped, freeing its port and chips"
    assert "--dtype float16" in (folder / (NAME + ".sh.previous")).read_text()
    assert "--dtype bfloat16" in (folder / (NAME + ".sh")).read_text()
    assert instance(host, "bfloat16").commit() is True
    assert NAME + "-previous" not in docker.containers
    assert sorted(path.name for path in folder.iterdir()) == [".config-hash-salt", NAME + ".env", NAME + ".sh"]


def test_a_container_mapping_other_chips_is_replaced_though_its_label_matches(host):
    _folder, docker = host
    serving(host)
    docker.containers[NAME]["devices"] = CHIPS[:1]
    assert vllm_instance.apply(instance(host), check_mode=False)["action"] == "replace"


def test_a_replacement_that_does_not_serve_is_restored_with_its_files(host):
    _folder, docker = host
    before = serving(host)
    result = vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    assert result["set_aside"] is True
    assert instance(host, "bfloat16").restore(instance(host).inspect(), replacement_failed=True) == (True, True)
    assert snapshot(host) == before


def test_a_new_instance_that_does_not_serve_is_removed_with_nothing_to_put_back(host):
    folder, docker = host
    vllm_instance.apply(instance(host), check_mode=False)
    changed, restored = instance(host).restore(instance(host).inspect(), replacement_failed=True)
    assert changed is True and restored is False and NAME not in docker.containers


def test_a_docker_run_that_fails_leaves_the_set_aside_container_for_the_restore(host):
    _folder, docker = host
    before = serving(host)
    docker.fail["run"] = "docker: Error response from daemon: port is already allocated.\n"
    result = vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    assert result["action"] == "replace" and result["set_aside"] is True
    assert "port is already allocated" in result["error"]
    del docker.fail["run"]
    instance(host, "bfloat16").restore(instance(host).inspect(), replacement_failed=True)
    assert snapshot(host) == before


def test_a_serving_container_that_cannot_be_set_aside_is_left_untouched_with_its_files(host):
    _folder, docker = host
    before = serving(host)
    docker.fail["rename"] = "Error response from daemon: the daemon is busy\n"
    result = vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    assert result["action"] == "failed" and "the daemon is busy" in result["error"] and result["changed"] is False
    assert snapshot(host) == before


def test_check_mode_changes_nothing_and_says_what_a_run_would_do(host):
    _folder, docker = host
    assert vllm_instance.apply(instance(host), check_mode=True) == dict(
        action="replace", set_aside=False, recovered=False, files_changed=True, error=None, changed=True)
    assert docker.containers == {}
    before = serving(host)
    decided = vllm_instance.apply(instance(host, "bfloat16"), check_mode=True)
    assert decided["action"] == "replace" and decided["set_aside"] is True and decided["changed"] is True
    assert vllm_instance.apply(instance(host), check_mode=True)["changed"] is False
    assert snapshot(host) == before


def test_an_instance_no_longer_planned_goes_with_every_file(host):
    folder, docker = host
    serving(host)
    vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)  # a replacement left midway
    assert instance(host).remove() is True
    assert docker.containers == {} and [path.name for path in folder.iterdir()] == [".config-hash-salt"]
    assert instance(host).remove() is False


def replacement_calls(tmp_path_factory):
    """The number of Docker calls a replacement makes, counted on a host of its own."""
    folder = tmp_path_factory.mktemp("count")
    (folder / ".config-hash-salt").write_text("s3cret")
    counting = (folder, FakeDocker(images={IMAGE: "sha256:" + "1" * 64}))
    serving(counting)
    start = len(counting[1].calls)
    vllm_instance.apply(instance(counting, "bfloat16"), check_mode=False)
    return len(counting[1].calls) - start


@pytest.mark.parametrize("stop_at", range(6))
def test_a_replacement_stopped_at_any_call_is_put_back_by_the_next_run(host, stop_at, tmp_path_factory):
    """Killed before its n-th Docker call (the host as Ctrl-C leaves it), or after the last with no commit: the
    next run with the old spec finds the container that served, with its files, and keeps it; nothing is left
    set aside."""
    _folder, docker = host
    # inspect, image inspect, (files set aside, new files written) rename, stop, run
    assert replacement_calls(tmp_path_factory) == 5, "a replacement's calls changed: update the range above"
    before = serving(host)
    docker.interrupt_at = len(docker.calls) + stop_at
    try:
        vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    except Interrupted:
        pass
    docker.interrupt_at = None
    result = vllm_instance.apply(instance(host), check_mode=False)
    assert result["action"] == "keep" and result["recovered"] is (stop_at >= 2), result
    assert snapshot(host) == before


@pytest.mark.parametrize("stop_at", range(4))
def test_a_restore_stopped_at_any_call_is_finished_by_the_next_run(host, stop_at):
    _folder, docker = host
    before = serving(host)
    vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    docker.interrupt_at = len(docker.calls) + stop_at
    try:
        instance(host, "bfloat16").restore(instance(host).inspect(), replacement_failed=True)
    except Interrupted:
        pass
    docker.interrupt_at = None
    # Stopped after the rename, the container put back is found stopped, and started.
    assert vllm_instance.apply(instance(host), check_mode=False)["action"] in ("keep", "start")
    assert snapshot(host) == before


@pytest.mark.parametrize("stop_at", range(3))
def test_a_commit_stopped_midway_still_ends_with_the_new_spec_serving(host, stop_at):
    """Stopped before the set-aside container is removed, the next run cannot tell the replacement served: it puts
    the old container back and replaces it again, which a commit then ends; stopped after, nothing is redone."""
    folder, docker = host
    serving(host)
    vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    new = docker.containers[NAME]["id"]
    docker.interrupt_at = len(docker.calls) + stop_at
    try:
        instance(host, "bfloat16").commit()
    except Interrupted:
        pass
    docker.interrupt_at = None
    result = vllm_instance.apply(instance(host, "bfloat16"), check_mode=False)
    if stop_at < 2:
        assert result["recovered"] and result["action"] == "replace" and result["set_aside"]
        instance(host, "bfloat16").commit()
    else:
        assert result["action"] == "keep" and docker.containers[NAME]["id"] == new
    labels = docker.containers[NAME]["labels"]
    assert labels["ascend-vllm-fleet.config-hash"] == instance(host, "bfloat16").spec_hash()
    assert sorted(docker.containers) == [NAME]
    assert "--dtype bfloat16" in (folder / (NAME + ".sh")).read_text()


def test_files_are_written_whole(host, monkeypatch):
    folder, _docker = host
    target = folder / "plan.json"
    target.write_text("old")

    def broken(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vllm_instance.os, "rename", broken)
    with pytest.raises(OSError):
        vllm_instance.write_atomically(str(target), "new", 0o644)
    assert target.read_text() == "old" and sorted(os.listdir(folder)) == [".config-hash-salt", "plan.json"]


def test_the_script_records_the_config_hash_its_container_gets(host):
    """What the verification reads as the deploy's spec: the label of the script the instance wrote, under its
    prefix; a script edited by hand names none, or another."""
    folder, docker = host
    vllm_instance.apply(instance(host), check_mode=False)
    script = (folder / (NAME + ".sh")).read_text()
    recorded = vllm_instance.recorded_hash(script, "ascend-vllm-fleet")
    assert recorded == instance(host).spec_hash() == docker.containers[NAME]["labels"]["ascend-vllm-fleet.config-hash"]
    assert vllm_instance.recorded_hash(script, "other-prefix") is None
    label = "ascend-vllm-fleet.config-hash=" + recorded
    assert vllm_instance.recorded_hash(script.replace(label, "ascend-vllm-fleet.config-hash=0000"),
                                       "ascend-vllm-fleet") == "0000"
    assert vllm_instance.recorded_hash(script.replace(label, "ascend-vllm-fleet.config-hash"),
                                       "ascend-vllm-fleet") is None
    assert vllm_instance.recorded_hash(script.replace("--label " + label, "'--label " + label),
                                       "ascend-vllm-fleet") is None, "a line no shell reads"
