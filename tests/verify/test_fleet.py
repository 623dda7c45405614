"""Every host still serves what the inventory says it should. Each failure names the host, the instance and
what differs."""
import re


def test_driver_and_firmware_are_the_required_ones(deployment):
    ascend = deployment.ascend
    assert ascend["ready"], "%s: npu-smi is not ready: %s" % (deployment.name, "; ".join(ascend["problems"]))
    for what, found, variable in (("driver", ascend["driver_version"], "ascend_preflight_driver_version"),
                                  ("firmware", ascend["firmware_version"], "ascend_preflight_firmware_version")):
        required = deployment.setting(variable)
        assert str(found).lower() == str(required).lower(), "%s: %s is %s, required %s" % (
            deployment.name, what, found, required)


def test_each_planned_container_runs_the_expected_spec(deployment):
    prefix = deployment.setting("fleet_label_prefix")
    image = deployment.plan["image"]
    for instance in deployment.instances():
        where = "%s, instance %s" % (deployment.name, instance["name"])
        container = deployment.container(instance["name"])
        assert container is not None, "%s: no such container" % where
        assert container["State"]["Running"], "%s: container is %s" % (where, container["State"]["Status"])
        # Docker restarts a crashed server at once: running now says nothing of the crash loop it may be in.
        assert container["RestartCount"] == 0, (
            "%s: crashed and was restarted by Docker %d time(s), last started %s; a server in a restart loop "
            "reloads the model again and again and drops every request in flight. Fix: `docker logs %s` shows "
            "why (a large image on 310P: set vllm_server_max_pixels), then deploy again" % (
                where, container["RestartCount"], container["State"]["StartedAt"], instance["name"]))
        assert container["Config"]["Image"] == image, "%s: runs image %s, expected %s" % (
            where, container["Config"]["Image"], image)
        policy = container["HostConfig"]["RestartPolicy"]["Name"]
        assert policy == deployment.setting("vllm_server_restart_policy"), "%s: restart policy %s, expected %s" % (
            where, policy, deployment.setting("vllm_server_restart_policy"))
        script = deployment.host.file("%s/%s.sh" % (deployment.setting("fleet_config_dir"), instance["name"]))
        assert script.exists, "%s: the rendered docker run %s is missing" % (where, script.path)
        rendered = re.search(r"%s\.config-hash=(\w+)" % re.escape(prefix), script.content_string).group(1)
        running = container["Config"]["Labels"].get(prefix + ".config-hash")
        assert running == rendered, "%s: config-hash label %s differs from the rendered script's %s" % (
            where, running, rendered)


def test_the_planned_chips_are_present_and_healthy(deployment):
    present = set(deployment.ascend["devices"])
    unhealthy = set(deployment.ascend["unhealthy_npu_ids"])
    for instance in deployment.instances():
        where = "%s, instance %s" % (deployment.name, instance["name"])
        missing = sorted(set(instance["devices"]) - present)
        assert not missing, "%s: planned chips %s are gone from the host" % (where, ", ".join(missing))
        sick = sorted(unhealthy & set(instance["npu_ids"]))
        assert not sick, "%s: serves on NPU %s, which is no longer healthy; redeploy to plan without it" % (
            where, ", ".join(map(str, sick)))


def test_only_the_planned_chips_are_mapped(deployment):
    for instance in deployment.instances():
        container = deployment.container(instance["name"])
        assert container is not None, "%s, instance %s: no such container" % (deployment.name, instance["name"])
        mapped = sorted(device["PathOnHost"] for device in container["HostConfig"]["Devices"] or []
                        if re.search(r"/davinci\d+$", device["PathOnHost"]))
        assert mapped == sorted(instance["devices"]), "%s, instance %s: maps %s, planned %s" % (
            deployment.name, instance["name"], mapped, sorted(instance["devices"]))


def test_each_instance_listens_and_answers_an_image_request_right(deployment):
    for instance in deployment.instances():
        port = instance["port"]
        where = "%s, instance %s" % (deployment.name, instance["name"])
        assert deployment.host.socket("tcp://0.0.0.0:%d" % port).is_listening or deployment.host.socket(
            "tcp://127.0.0.1:%d" % port).is_listening, "%s: nothing listens on port %d" % (where, port)
        served = deployment.plan["served_name"]
        probe = deployment.probes.get(instance["name"], {})
        assert "models" in probe and not probe.get("failed"), "%s: does not serve: %s" % (where, probe.get("msg"))
        assert (probe.get("answer_check") or {}).get("passed"), "%s: does not serve: %s" % (where, probe.get("msg"))
        assert served in probe["models"] and probe["answer"] and probe["usage"]["completion_tokens"] > 0, (
            "%s: unexpected answer %s" % (where, probe))
