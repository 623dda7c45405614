"""The serving plan: which chips each instance maps, on which port, and the errors for impossible plans."""
import pytest
from ansible.errors import AnsibleFilterError
from serving_plans import MANAGERS, PLAN_SETTINGS, host, plan, vllm_server

from ansible_collections.ascend.fleet.plugins.module_utils import serving_plan

# The role's settings for the docker run (vars/main.yml), with the role's defaults and no environment of its own.
RUN_SETTINGS = {"docker_bin": "docker", "label_prefix": "site", "restart_policy": "always", "shm_size": "10g",
                "privileged": False, "dcmi_dir": "/usr/local/dcmi", "npu_smi": "/usr/local/bin/npu-smi",
                "driver_home": "/usr/local/Ascend/driver", "install_info": "/etc/ascend_install.info",
                "cache_dir": "/root/.cache", "model_dir": "/m", "model_container_dir": "/m",
                "bind_address": "0.0.0.0", "container_port": 8000, "env": {}, "env_file": "",
                "gpu_memory_utilization": 0.75, "max_model_len": 8192,
                "enforce_eager": True, "compilation_config": {}, "additional_config": {}, "dtype": "float16",
                "max_pixels": 0, "extra_args": [], "jemalloc_path": "",
                "cpu_binding": "cpuset", "hub_offline": True, "usage_stats": False, "ready_timeout": 1200,
                "log_driver": "json-file", "log_options": {"max-size": "100m", "max-file": "5"}}
# What every container's environment holds whatever vllm_server_env says, with the role's defaults.
ROLE_ENV = ["DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_ENGINE_READY_TIMEOUT_S=1200",
            "VLLM_NO_USAGE_STATS=1"]


def environment(lines):
    return [line[1] for line in lines if line[0] == "-e"]


def test_single_maps_every_chip_on_the_base_port_and_records_what_it_serves():
    # As vllm_plan records it on the host: the format, and each instance's container and files.
    recorded = serving_plan.complete(plan(host()), "/etc/vllm-ascend")
    fit = recorded["instances"][0].pop("fit")
    assert recorded == {
        "format": 1, "host": "npu-node-01", "layout": "single", "layout_reason": "asked for: single",
        "image": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p", "served_name": "Qwen3-VL-8B-Instruct",
        "excluded_npu_ids": [], "manager_devices": MANAGERS,
        "instances": [{"name": "vllm-ascend", "port": 8000, "npu_ids": [1, 2, 4, 5],
                       "devices": ["/dev/davinci%d" % n for n in range(8)], "logic_ids": list(range(8)),
                       "cpus": None, "tensor_parallel_size": 2, "container": "vllm-ascend",
                       "script": "/etc/vllm-ascend/vllm-ascend.sh", "env_file": "/etc/vllm-ascend/vllm-ascend.env"}]}
    # The chip with the least memory bounds it: the Duo's chip 1.
    assert (fit["fits"], fit["chip"], fit["memory_mb"], fit["tensor_parallel_size"]) == (True, "NPU 1 chip 1", 43693, 2)


def test_per_card_gives_each_card_its_two_chips_and_the_next_port():
    instances = plan(host(), "per_card")["instances"]
    assert [(i["name"], i["port"], i["devices"]) for i in instances] == [
        ("vllm-ascend-npu1", 8000, ["/dev/davinci0", "/dev/davinci1"]),
        ("vllm-ascend-npu2", 8001, ["/dev/davinci2", "/dev/davinci3"]),
        ("vllm-ascend-npu4", 8002, ["/dev/davinci4", "/dev/davinci5"]),
        ("vllm-ascend-npu5", 8003, ["/dev/davinci6", "/dev/davinci7"]),
    ]


def test_unhealthy_cards_are_left_out_whatever_ran_before():
    recorded = plan(host(unhealthy=[2]), "per_card", name="v", port=9000)
    assert [i["name"] for i in recorded["instances"]] == ["v-npu1", "v-npu4", "v-npu5"]
    assert recorded["instances"][1]["port"] == 9001 and recorded["excluded_npu_ids"] == [2]
    (single,) = plan(host(unhealthy=[2]))["instances"]
    assert "/dev/davinci2" not in single["devices"] and len(single["devices"]) == 6


def test_no_plan_maps_a_chip_twice():
    for layout in ("single", "per_card"):
        devices = [d for instance in plan(host(), layout)["instances"] for d in instance["devices"]]
        assert len(devices) == len(set(devices)) == 8
    facts = host()
    facts["chips"][3]["device"] = "/dev/davinci0"  # facts that give two chips one node
    for layout in ("single", "per_card"):
        with pytest.raises(AnsibleFilterError, match=r"maps a chip twice \(/dev/davinci0\).*phyid-remap"):
            plan(facts, layout)


def test_tensor_parallel_larger_than_a_card_is_refused_with_the_fix():
    with pytest.raises(AnsibleFilterError, match="tensor_parallel_size is 2 but instance v-npu8 has 1 chip"):
        plan(host(npu_ids=(8,), chips_per_card=1), "per_card", name="v")


def test_no_usable_chip_unknown_layout_and_missing_manager_devices():
    with pytest.raises(AnsibleFilterError, match=r"no usable NPU chip on npu-node-01 \(cards left out .*: \[1\]"):
        plan(host(npu_ids=(1,), unhealthy=[1]))
    with pytest.raises(AnsibleFilterError, match="expected one of single, per_card, per_chip, auto"):
        plan(host(), "per_socket")
    with pytest.raises(AnsibleFilterError, match="/dev/hisi_hdc missing on npu-node-01.*reinstall the Ascend driver"):
        plan(host(missing_managers=["/dev/hisi_hdc"]))


def test_the_docker_run_uses_the_fleet_docker_cli_and_the_planned_manager_devices():
    recorded = plan(host(npu_ids=(1,)))
    settings = dict(RUN_SETTINGS, docker_bin="/opt/docker/bin/docker")
    lines = vllm_server.vllm_server_docker_run(recorded["instances"][0], recorded, settings)
    assert lines[0][:2] == ["/opt/docker/bin/docker", "run"]
    devices = [line[1] for line in lines if line[0] == "--device"]
    assert devices == ["/dev/davinci0:/dev/davinci0", "/dev/davinci1:/dev/davinci1"] + [
        "%s:%s" % (path, path) for path in MANAGERS]
    assert ["--label", "site.host=npu-node-01"] in lines and ["--", recorded["image"]] in lines
    assert environment(lines) == ROLE_ENV, "no environment was asked for: the role's own only"


def test_vllm_waits_for_its_engine_as_long_as_the_role_and_never_asks_the_hub_or_reports_usage():
    """vLLM 0.18 gives up on its engine after 600 s unless told otherwise: a slower load would restart in a loop."""
    recorded = plan(host(npu_ids=(1,)))
    instance = recorded["instances"][0]
    settings = dict(RUN_SETTINGS, ready_timeout=1800)
    assert "VLLM_ENGINE_READY_TIMEOUT_S=1800" in environment(vllm_server.vllm_server_docker_run(
        instance, recorded, settings))
    # Asked for: the hub and the usage statistics; the timeout stays.
    online = dict(settings, hub_offline=False, usage_stats=True)
    assert environment(vllm_server.vllm_server_docker_run(instance, recorded, online)) == [
        "VLLM_ENGINE_READY_TIMEOUT_S=1800"]
    # vllm_server_env and vllm_server_extra_env have the last word on any of them.
    overridden = dict(settings, env={"VLLM_ENGINE_READY_TIMEOUT_S": "3600", "HF_HUB_OFFLINE": "0"})
    shown = environment(vllm_server.vllm_server_docker_run(instance, recorded, overridden))
    assert "VLLM_ENGINE_READY_TIMEOUT_S=3600" in shown and "HF_HUB_OFFLINE=0" in shown
    assert len(shown) == len(ROLE_ENV), shown


def test_a_containers_log_is_bounded_on_the_host():
    """Docker's json-file driver keeps a whole log by default: weeks of requests or a restart loop fill the disk."""
    recorded = plan(host(npu_ids=(1,)))
    lines = vllm_server.vllm_server_docker_run(recorded["instances"][0], recorded, RUN_SETTINGS)
    assert [line for line in lines if line[0] in ("--log-driver", "--log-opt")] == [
        ["--log-driver", "json-file"], ["--log-opt", "max-file=5"], ["--log-opt", "max-size=100m"]]
    # Options go before the image, where docker reads them as its own.
    assert lines.index(["--log-opt", "max-size=100m"]) < lines.index(["--", recorded["image"]])
    # The daemon's own driver, with its own options: json-file's would make journald's or syslog's refuse the run.
    daemons = vllm_server.vllm_server_docker_run(recorded["instances"][0], recorded, dict(RUN_SETTINGS, log_driver=""))
    assert not [line for line in daemons if line[0] in ("--log-driver", "--log-opt")]


def test_a_privileged_instance_is_kept_to_its_own_chips_by_the_runtimes_visible_devices():
    """A privileged container sees every chip of the host and would open logical 0 and 1 in each instance."""
    recorded = plan(host(), "per_card")
    settings = dict(RUN_SETTINGS, privileged=True, jemalloc_path="/usr/lib/aarch64-linux-gnu/libjemalloc.so.2")
    visible = []
    for instance in recorded["instances"]:
        lines = vllm_server.vllm_server_docker_run(instance, recorded, settings)
        assert ["--privileged"] in lines
        shown = environment(lines)
        assert "LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libjemalloc.so.2" in shown
        visible += [item.split("=", 1)[1] for item in shown if item.startswith("ASCEND_RT_VISIBLE_DEVICES=")]
    assert visible == ["0,1", "2,3", "4,5", "6,7"]
    unprivileged = vllm_server.vllm_server_docker_run(recorded["instances"][1], recorded,
                                                      dict(settings, privileged=False))
    assert not [line for line in unprivileged if "ASCEND_RT_VISIBLE_DEVICES" in line[-1]], (
        "an unprivileged container sees only its own chips, numbered from 0")


@pytest.mark.parametrize("setting,value,variable", [
    ("container_name", "vllm\ntouch /tmp/owned", "vllm_server_container_name"),
    ("container_name", "vllm-ascend\n", "vllm_server_container_name"),
    ("image", "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p\n", "fleet_image"),
    ("served_name", "Qwen3-VL-8B-Instruct\n", "vllm_server_served_name"),
    ("container_name", "../etc/vllm", "vllm_server_container_name"),
    ("container_name", "-v", "vllm_server_container_name"),
    ("container_name", "", "vllm_server_container_name"),
    ("image", "--privileged", "fleet_image"),
    ("image", "quay.io/ascend/vllm-ascend:v1 --all-tags", "fleet_image"),
    ("image", "Quay.io/Ascend/VLLM", "fleet_image"),
    ("image", "quay.io/ascend/vllm-ascend@sha256:abc", "fleet_image"),
    ("served_name", "Qwen3 VL", "vllm_server_served_name"),
    ("served_name", "-x", "vllm_server_served_name"),
    ("served_name", 8, "vllm_server_served_name"),
])
def test_names_that_would_become_flags_paths_or_lines_are_refused(setting, value, variable):
    settings = dict(PLAN_SETTINGS, **{setting: value})
    with pytest.raises(AnsibleFilterError, match="^%s is .*: expected " % variable):
        vllm_server.vllm_server_plan(host(), settings)


@pytest.mark.parametrize("image", ["quay.io/ascend/vllm-ascend:v0.18.0rc1-310p", "twin-registry:5000/a/b:c",
                                   "localhost/vllm", "vllm-ascend", "registry.example.cn:5000/ascend/vllm-ascend"
                                   "@sha256:" + "ab" * 32])
def test_image_references_a_site_uses_are_accepted(image):
    recorded = vllm_server.vllm_server_plan(host(), dict(PLAN_SETTINGS, image=image))
    assert recorded["image"] == image


def test_the_mount_sources_to_check_are_named_with_their_variable():
    settings = {"dcmi_dir": "/usr/local/dcmi", "npu_smi": "/usr/local/bin/npu-smi",
                "driver_home": "/usr/local/Ascend/driver/", "install_info": "/etc/ascend_install.info",
                "cache_dir": "/var/cache/vllm-ascend", "model_dir": "/data/m", "model_container_dir": "/data/m"}
    assert vllm_server.vllm_server_required_paths(settings) == {
        "/usr/local/dcmi": "fleet_dcmi_dir", "/usr/local/bin/npu-smi": "fleet_npu_smi",
        "/usr/local/Ascend/driver/lib64/": "fleet_driver_home", "/usr/local/Ascend/driver/version.info":
        "fleet_driver_home", "/etc/ascend_install.info": "fleet_install_info", "/data/m": "fleet_model_dir"}


def with_affinity(ascend, affinity_by_npu):
    for chip in ascend["chips"]:
        chip["cpu_affinity"] = affinity_by_npu.get(chip["npu_id"], [])
    return ascend


def test_per_card_instances_sharing_a_numa_node_get_disjoint_cpus():
    node0, node2 = list(range(0, 24)), list(range(48, 72))
    facts = with_affinity(host(), {1: node0, 2: node0, 4: node2, 5: node2})
    instances = plan(facts, "per_card")["instances"]
    assert [i["cpus"] for i in instances] == [node0[:12], node0[12:], node2[:12], node2[12:]]
    settings = dict(RUN_SETTINGS, privileged=False)
    recorded = plan(facts, "per_card")
    lines = vllm_server.vllm_server_docker_run(recorded["instances"][3], recorded, settings)
    assert ["--cpuset-cpus", "60-71"] in lines and not [line for line in lines if line[0] == "--additional-config"]
    # The seed's single container, and an operator who keeps vLLM-Ascend's own binding: no cpuset.
    assert plan(facts)["instances"][0]["cpus"] is None
    assert [i["cpus"] for i in plan(facts, "per_card", cpu_binding="vllm")["instances"]] == [None] * 4
    disabled = vllm_server.vllm_server_docker_run(recorded["instances"][0], recorded,
                                                  dict(settings, cpu_binding="disabled"))
    assert ["--additional-config", '{"enable_cpu_binding": false}'] in disabled


def test_an_instance_whose_chips_affinity_is_unknown_gets_vllm_binding_off():
    """Without an affinity vLLM-Ascend slices all CPUs the same way in every container: off is better."""
    facts = with_affinity(host(npu_ids=(1, 2)), {1: list(range(24))})
    recorded = plan(facts, "per_card")
    assert [i["cpus"] for i in recorded["instances"]] == [list(range(24)), None]
    settings = dict(RUN_SETTINGS, privileged=False)
    unknown = vllm_server.vllm_server_docker_run(recorded["instances"][1], recorded, settings)
    assert ["--additional-config", '{"enable_cpu_binding": false}'] in unknown
    assert not [line for line in unknown if line[0] == "--cpuset-cpus"]


def test_offline_cpus_are_never_in_a_cpuset():
    """Docker refuses a cpuset naming CPUs the host does not have online."""
    node = list(range(48, 72))
    facts = with_affinity(host(npu_ids=(1, 2)), {1: node, 2: node})
    facts["online_cpus"] = list(range(0, 60))
    assert [i["cpus"] for i in plan(facts, "per_card")["instances"]] == [list(range(48, 54)), list(range(54, 60))]
    facts["online_cpus"] = [0, 1]
    assert [i["cpus"] for i in plan(facts, "per_card")["instances"]] == [None, None]
    # A pool with fewer CPUs than instances confines none of those it has no CPU for.
    assert [i["cpus"] for i in plan(with_affinity(host(npu_ids=(1, 2)), {1: [0, 1], 2: [0, 1]}), "per_chip")[
        "instances"]] == [None, [0], None, [1]]


def applied(*rows):
    """The register of the vllm_instance task: per instance its result, with the loop's item."""
    return {"results": [dict(vllm_server_instance=dict(name=name, port=8000 + index), action=action,
                             set_aside=set_aside, error=error, changed=True)
                        for index, (name, action, set_aside, error) in enumerate(rows)]}


def test_outcomes_name_what_did_not_start_or_serve_and_nothing_else():
    started = applied(("a", "replace", True, None), ("b", "keep", False, None),
                      ("c", "start", False, "`docker start -- c` failed: port is already allocated"),
                      ("d", "replace", True, None), ("e", "failed", False, "the daemon is busy"))
    instances = [result["vllm_server_instance"] for result in started["results"]]
    # As async_status gives them back, with failed_when false: a failed probe keeps its message only.
    probes = {"results": [
        {"item": {"vllm_server_instance": instances[0]}, "finished": 1, "failed": False, "models": ["m"]},
        {"item": {"vllm_server_instance": instances[1]}, "finished": 1, "failed": False, "msg": "not ready after 5s"},
        {"item": {"vllm_server_instance": instances[3]}, "finished": 0, "failed": False}]}
    # As launched: async jobs (their outcome is async_status's).
    launched = {"results": [{"vllm_server_instance": instances[i], "ansible_job_id": "j%d" % i, "started": 1,
                             "finished": 0, "results_file": "/root/.ansible_async/j%d" % i} for i in (0, 1, 3)]}
    outcomes = {o["name"]: o for o in vllm_server.vllm_server_outcomes(started, launched, probes)}
    assert outcomes["a"]["error"] is None and outcomes["b"]["error"] == "not ready after 5s"
    assert outcomes["c"]["error"].endswith("port is already allocated")
    assert "did not finish within the wait limit" in outcomes["d"]["error"]
    assert outcomes["e"]["action"] == "failed" and outcomes["a"]["set_aside"] is True


def test_a_converged_hosts_checks_polled_to_their_end_say_what_serves():
    """A host with nothing to change checks its instances with async jobs polled to their end: each result is the
    probe's own, with its job id and finished; one that timed out is Ansible's own failure, without a job id."""
    decided = applied(("a", "keep", False, None), ("b", "keep", False, None), ("c", "keep", False, None))
    instances = [result["vllm_server_instance"] for result in decided["results"]]
    polled = {"results": [
        {"vllm_server_instance": instances[0], "ansible_job_id": "j0", "finished": 1, "models": ["m"]},
        {"vllm_server_instance": instances[1], "ansible_job_id": "j1", "finished": 1, "msg": "answered 500"},
        {"vllm_server_instance": instances[2], "failed": False,
         "msg": "async task did not complete within the requested time - 1560s"}]}
    outcomes = {o["name"]: o for o in vllm_server.vllm_server_outcomes(decided, {}, {}, polled)}
    assert outcomes["a"]["error"] is None and outcomes["b"]["error"] == "answered 500"
    assert outcomes["c"]["error"].startswith("async task did not complete")


def test_only_an_instance_the_run_changes_counts_as_a_change():
    """What sends the server phase on from its decision: a container to start or replace, an interrupted run's
    set-aside container to recover, or files to write again; a container kept as it is, with its files, is none."""
    decided = applied(("kept", "keep", False, None), ("stopped", "start", False, None),
                      ("new", "replace", False, None), ("recovered", "keep", False, None),
                      ("edited", "keep", False, None))
    decided["results"][3]["recovered"] = True
    decided["results"][4]["files_changed"] = True
    changes = {o["name"]: o["changes"] for o in vllm_server.vllm_server_outcomes(decided)}
    assert changes == {"kept": False, "stopped": True, "new": True, "recovered": True, "edited": True}


def test_a_probe_that_could_not_be_launched_is_no_success():
    started = applied(("a", "replace", True, None))
    instance = started["results"][0]["vllm_server_instance"]
    launched = {"results": [{"vllm_server_instance": instance, "failed": False, "msg": "async_wrapper: fork failed"}]}
    (outcome,) = vllm_server.vllm_server_outcomes(started, launched, {"skipped": True})
    assert outcome["error"] == "async_wrapper: fork failed"
    # In check mode the launch is the probe itself, run in place: no message means it serves.
    launched = {"results": [{"vllm_server_instance": instance, "failed": False, "models": ["m"]}]}
    (outcome,) = vllm_server.vllm_server_outcomes(started, launched, {"skipped": True})
    assert outcome["error"] is None


def test_each_failure_says_what_serves_instead():
    outcomes = vllm_server.vllm_server_outcomes(applied(
        ("kept", "keep", False, "not ready"), ("untouched", "failed", False, "the daemon is busy"),
        ("new", "replace", False, "no such image"), ("back", "replace", True, "dtype bfloat16"),
        ("broken", "replace", True, "max_model_len"), ("fine", "replace", True, None)))
    by_name = {outcome["name"]: outcome for outcome in outcomes}
    finished = {"results": [{"vllm_server_instance": by_name[name], "restored": restored}
                            for name, restored in (("new", False), ("back", True), ("broken", True))]
                + [{"vllm_server_instance": by_name["fine"], "changed": True}]}
    restored = {"results": [{"vllm_server_instance": by_name["back"], "models": ["m"]},
                            {"vllm_server_instance": by_name["broken"], "msg": "exited: No such file or directory"}]}
    failures = vllm_server.vllm_server_failures(outcomes, finished, restored, "npu-a")
    assert failures == [
        "kept on npu-a does not serve: not ready",
        "untouched on npu-a did not start: the daemon is busy ---- The serving container was not touched.",
        "new on npu-a did not start: no such image ---- There was no previous container to restore.",
        "back on npu-a did not start: dtype bfloat16 ---- The previous container is serving again.",
        "broken on npu-a did not start: max_model_len ---- The previous container was put back but does not serve: "
        "exited: No such file or directory"]
    assert vllm_server.vllm_server_failures(outcomes, {"skipped": True}, {"skipped": True}, "h")[2].endswith(
        "There was no previous container to restore.")


def test_a_replacement_the_canary_gate_rejected_is_rolled_back_and_says_so():
    """A canary batch's replacement that serves but that its gate rejected is no success: the finish step restores
    what it replaced, and the failure says why, not that it did not start."""
    started = applied(("canary", "replace", True, None), ("kept", "keep", False, None))
    reason = "rejected by the canary gate of its batch: npu-a canary: throughput -23.0 %"
    outcomes = vllm_server.vllm_server_outcomes(started, rejected={"canary": reason})
    by_name = {outcome["name"]: outcome for outcome in outcomes}
    assert by_name["canary"]["error"] == reason and by_name["canary"]["rejected"] is True
    assert by_name["kept"]["error"] is None and by_name["kept"]["rejected"] is False
    finished = {"results": [{"vllm_server_instance": by_name["canary"], "restored": True}]}
    restored = {"results": [{"vllm_server_instance": by_name["canary"], "models": ["m"]}]}
    assert vllm_server.vllm_server_failures(outcomes, finished, restored, "npu-a") == [
        "canary on npu-a served but was rolled back: %s ---- The previous container is serving again." % reason]
