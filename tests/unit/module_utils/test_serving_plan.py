"""module_utils/serving_plan.py: the host checked against its plan before anything changes, the plan completed
and recorded whole, and the instances it no longer has removed (Docker: tests/fake_docker.py)."""
import json
import stat

import pytest
from fake_docker import FakeDocker

from ansible_collections.ascend.fleet.plugins.module_utils import serving_plan, vllm_instance
from ansible_collections.ascend.fleet.plugins.modules import vllm_plan

PREFIX = "ascend-vllm-fleet"


def plan(*instances):
    return {"format": 1, "host": "npu-a", "image": "img", "instances": [
        {"name": name, "port": 8000 + index, "devices": devices} for index, (name, devices) in enumerate(instances)]}


def test_containers_of_other_owners_holding_planned_chips_are_named():
    docker = FakeDocker()
    docker.add("vllm-ascend-old", {PREFIX + ".instance": "vllm-ascend-old", PREFIX + ".host": "npu-a"},
               ["/dev/davinci0"])
    docker.add("llm-test", {}, ["/dev/davinci3", "/dev/davinci1", "/dev/davinci_manager"])
    docker.add("web")
    docker.add("debug", privileged=True)  # sees every chip, opens none: not named
    docker.add("stopped", {}, ["/dev/davinci0"], running=False)
    refused = serving_plan.refusals(plan(("a", ["/dev/davinci0", "/dev/davinci1"]), ("b", ["/dev/davinci3"])),
                                    {}, "docker", PREFIX, runner=docker)
    (sentence,) = refused
    assert "held by containers not deployed here by this collection: container llm-test maps /dev/davinci1, " \
           "/dev/davinci3." in sentence and "drvRet=87" in sentence and "Fix:" in sentence


def test_missing_mount_sources_are_named_with_their_variable(tmp_path):
    present = tmp_path / "driver"
    present.mkdir()
    refused = serving_plan.refusals(plan(("a", ["/dev/davinci0"])), {
        str(tmp_path / "dcmi-gone"): "fleet_dcmi_dir", str(present): "fleet_driver_home",
        str(tmp_path / "m"): "fleet_model_dir"}, "docker", PREFIX, runner=FakeDocker())
    (sentence,) = refused
    assert "npu-a lacks what every vLLM container mounts: %s (set by fleet_dcmi_dir); %s (set by fleet_model_dir)." % (
        tmp_path / "dcmi-gone", tmp_path / "m") in sentence
    assert "driver" not in sentence.split("Fix:")[0].replace("the Ascend driver", "")


@pytest.fixture
def folders(tmp_path):
    return {"config_dir": str(tmp_path / "etc"), "cache_dir": str(tmp_path / "cache"),
            "salt_file": str(tmp_path / "etc" / ".config-hash-salt"), "path": str(tmp_path / "etc" / "plan.json")}


def record(recorded, folders, docker, check_mode=False, keep_stale=False):
    return serving_plan.record(recorded, folders["path"], folders["config_dir"], folders["cache_dir"],
                               folders["salt_file"], "docker", PREFIX, check_mode, keep_stale, runner=docker)


def test_the_plan_is_recorded_with_each_instances_files_and_the_host_made_ready(tmp_path, folders):
    completed = serving_plan.complete(plan(("a", ["/dev/davinci0"])), folders["config_dir"])
    assert completed["instances"][0]["script"] == folders["config_dir"] + "/a.sh"
    assert completed["instances"][0]["env_file"] == folders["config_dir"] + "/a.env"
    assert completed["instances"][0]["container"] == "a"
    docker = FakeDocker()
    assert record(completed, folders, docker, check_mode=True) == (True, [], False)
    assert not (tmp_path / "etc").exists(), "check mode writes nothing"
    assert record(completed, folders, docker) == (True, [], False)
    assert json.loads((tmp_path / "etc" / "plan.json").read_text()) == completed
    assert stat.S_IMODE((tmp_path / "etc").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    salt = (tmp_path / "etc" / ".config-hash-salt").read_text()
    assert len(salt) == 32 and stat.S_IMODE((tmp_path / "etc" / ".config-hash-salt").stat().st_mode) == 0o600
    assert record(completed, folders, docker) == (False, [], False), "a second run changes nothing"
    assert (tmp_path / "etc" / ".config-hash-salt").read_text() == salt, "the salt is made once"


def test_instances_no_longer_planned_go_with_their_files_and_a_planned_ones_set_aside_stays(tmp_path, folders):
    docker = FakeDocker()
    labels = {PREFIX + ".host": "npu-a"}
    for name in ("a", "a-previous", "a-npu1", "a-npu2-previous"):
        docker.add(name, dict(labels, **{PREFIX + ".instance": name}))
    docker.add("other-host", {PREFIX + ".host": "npu-b", PREFIX + ".instance": "x"})
    docker.add("theirs")
    (tmp_path / "etc").mkdir()
    for stale in ("a-npu1.sh", "a-npu1.env", "a-npu1.sh.previous", "a-npu2.env.previous"):
        (tmp_path / "etc" / stale).write_text("x")
    completed = serving_plan.complete(plan(("a", ["/dev/davinci0"])), folders["config_dir"])
    assert record(completed, folders, docker, check_mode=True) == (True, ["a-npu1", "a-npu2"], True)
    assert len(docker.containers) == 6
    # A layout change keeps them serving until they are drained: named, left running, the plan recorded.
    assert record(completed, folders, docker, keep_stale=True) == (True, ["a-npu1", "a-npu2"], False)
    assert len(docker.containers) == 6 and (tmp_path / "etc" / "a-npu1.sh").exists()
    assert record(completed, folders, docker, keep_stale=True) == (False, ["a-npu1", "a-npu2"], False)
    assert record(completed, folders, docker) == (True, ["a-npu1", "a-npu2"], True)
    assert sorted(docker.containers) == ["a", "a-previous", "other-host", "theirs"]
    assert sorted(path.name for path in (tmp_path / "etc").iterdir()) == [".config-hash-salt", "plan.json"]


def test_a_docker_that_fails_to_list_is_named(folders):
    docker = FakeDocker()
    docker.fail["ps"] = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock\n"
    with pytest.raises(vllm_instance.DockerError, match="docker ps.*Cannot connect"):
        record(serving_plan.complete(plan(("a", [])), folders["config_dir"]), folders, docker)


# --- reading it back -----------------------------------------------------------------------------------------------

def recorded_for(host_name, **changes):
    recorded = serving_plan.complete(plan(("vllm-ascend", ["/dev/davinci0"])), "/etc/vllm-ascend")
    recorded.update(host=host_name, **changes)
    return recorded


def test_a_recorded_plan_reads_back_as_written_and_a_missing_one_as_none(tmp_path):
    path = tmp_path / "plan.json"
    assert serving_plan.read(str(path), "npu-a") is None, "no plan file: the host is not deployed yet"
    path.write_text(serving_plan.plan_text(recorded_for("npu-a")))
    assert serving_plan.read(str(path), "npu-a") == recorded_for("npu-a")


@pytest.mark.parametrize("recorded,expected", [
    (recorded_for("npu-node-02", format=2), "format 2, expected 1"),
    ([1, 2], "format \"list\", expected 1"),
    (recorded_for("npu-node-01"), "it is the plan of \"npu-node-01\", not of npu-node-02"),
    (recorded_for("npu-node-02", instances=[]), "no instances"),
    (recorded_for("npu-node-02", instances=[{"name": "vllm-ascend", "port": "8000"}]), "has port \"8000\""),
    (recorded_for("npu-node-02", instances=[{"name": "vllm-ascend", "port": 70000}]), "has port 70000"),
    (recorded_for("npu-node-02", instances=[{"name": "vllm-ascend", "port": True}]), "has port true"),
    # A name is the stem of the instance's files and a line of haproxy.cfg: all of it must be a container name.
    (recorded_for("npu-node-02", instances=[{"name": "vllm-ascend\n", "port": 8000}]),
     "instance {\"name\": \"vllm-ascend\\n\", \"port\": 8000}, expected one whose name is a container name"),
    (recorded_for("npu-node-02", instances=[{"name": "../../etc/cron.d/x", "port": 8000}]),
     "expected one whose name is a container name"),
    (recorded_for("npu-node-02", instances=[{"port": 8000}]), "expected one whose name is a container name"),
    (recorded_for("npu-node-02", instances=["vllm-ascend"]), "instance \"vllm-ascend\", expected one whose name"),
])
def test_a_plan_vllm_plan_did_not_write_for_the_host_is_refused(tmp_path, recorded, expected):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(recorded))
    with pytest.raises(serving_plan.PlanError) as refused:
        serving_plan.read(str(path), "npu-node-02")
    assert expected in str(refused.value) and str(path) in str(refused.value)
    assert "--limit npu-node-02" in str(refused.value)


@pytest.mark.parametrize("content,expected", [
    (b"{not json", "is not JSON"),
    (b"\xff\xfe", "is not JSON"),
    (b"[" * 100000 + b"]" * 100000, "is not JSON"),  # nested deeper than the parser goes: no RecursionError
])
def test_a_plan_file_that_is_no_json_is_refused_naming_the_host(tmp_path, content, expected):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    with pytest.raises(serving_plan.PlanError) as refused:
        serving_plan.read(str(path), "npu-node-02")
    assert "serving plan of npu-node-02" in str(refused.value) and expected in str(refused.value)


def test_a_plan_file_that_cannot_be_read_names_the_host_and_the_fix(tmp_path):
    path = tmp_path / "plan.json"
    path.mkdir()  # reading a folder fails as a file the connection may not read does
    with pytest.raises(serving_plan.PlanError) as refused:
        serving_plan.read(str(path), "npu-node-02")
    assert "serving plan of npu-node-02: could not read it" in str(refused.value) and "Fix:" in str(refused.value)


def test_the_recorded_fields_are_the_ones_vllm_plan_documents():
    """The plan's one description is vllm_plan's RETURN: a field written but not documented, or documented but
    not written, fails here."""
    import yaml


    documented = yaml.safe_load(vllm_plan.RETURN)["plan"]["contains"]
    from serving_plans import host
    from serving_plans import plan as planned
    recorded = serving_plan.complete(planned(host(), "per_card"), "/etc/vllm-ascend")
    assert sorted(recorded) == sorted(documented)
    assert sorted(recorded["instances"][0]) == sorted(documented["instances"]["contains"])


def test_teardown_removes_what_the_plan_names_and_the_labels_find_and_nothing_else(tmp_path, folders):
    docker = FakeDocker()
    labels = {PREFIX + ".host": "npu-a"}
    docker.add("a", dict(labels, **{PREFIX + ".instance": "a"}))
    docker.add("b-previous", dict(labels, **{PREFIX + ".instance": "b"}))  # a plan whose file is gone
    docker.add("theirs")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "plan.json").write_text(serving_plan.plan_text(
        serving_plan.complete(plan(("a", ["/dev/davinci0"])), folders["config_dir"])))
    for name in (".config-hash-salt", "a.sh", "a.env", "b.sh.previous", "other-tool.conf"):
        (etc / name).write_text("x")
    removed = serving_plan.remove_all(folders["path"], "npu-a", folders["config_dir"], folders["salt_file"], "docker",
                                      PREFIX, False, runner=docker)
    assert removed[:2] == (True, ["a", "b"]) and removed[2]["image"] == "img"
    assert sorted(docker.containers) == ["theirs"]
    assert [path.name for path in etc.iterdir()] == ["other-tool.conf"], "the folder may be shared"
    (etc / "other-tool.conf").unlink()
    assert serving_plan.remove_all(folders["path"], "npu-a", folders["config_dir"], folders["salt_file"], "docker",
                                   PREFIX, False, runner=docker) == (True, [], None)
    assert not etc.exists(), "an empty config folder goes"


def test_teardown_stops_before_removing_anything_at_a_plan_of_another_host(tmp_path, folders):
    docker = FakeDocker()
    docker.add("a", {PREFIX + ".host": "npu-a", PREFIX + ".instance": "a"})
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "plan.json").write_text(json.dumps(recorded_for("npu-z")))
    with pytest.raises(serving_plan.PlanError, match="not of npu-a"):
        serving_plan.remove_all(folders["path"], "npu-a", folders["config_dir"], folders["salt_file"], "docker",
                                PREFIX, False, runner=docker)
    assert sorted(docker.containers) == ["a"] and (tmp_path / "etc" / "plan.json").exists()
