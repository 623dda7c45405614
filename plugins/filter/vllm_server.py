"""The serving plan and the docker run of each instance, from the host's NPU facts and the role's settings.

Python rather than Jinja because both are small programs: which chips each instance gets, and the exact
argument list the seed's `docker run` + `vllm serve` becomes. The unit tests compare the result with the
seed's command.
"""
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.module_utils import model_fit
from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import (
    HOST_LABEL,
    INSTANCE_LABEL,
    PORT_LABEL,
    SERVED_NAME_LABEL,
    label_name,
)

# Where the container expects the host's Ascend files (the vLLM-Ascend docs' docker run): host path -> these.
CONTAINER_PATHS = {
    "dcmi": "/usr/local/dcmi",
    "npu_smi": "/usr/local/bin/npu-smi",
    "driver_lib64": "/usr/local/Ascend/driver/lib64/",
    "driver_version": "/usr/local/Ascend/driver/version.info",
    "install_info": "/etc/ascend_install.info",
    "cache": "/root/.cache",
}
# Docker's own rule for container names; per_card appends -npu<ID> to it, per_chip -npu<ID>-chip<ID>. The names
# are matched whole (fullmatch): re.match's `$` lets a value end in a line break, which would be a new line of the
# rendered script.
CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}")
# A registry reference: [host[:port]/]path[:tag][@sha256:digest], path components in lower case (the grammar
# of Docker's distribution/reference, without its rarely used forms).
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(r"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?%s(?:/%s)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                             r"(?:@sha256:[0-9a-f]{64})?" % (COMPONENT, COMPONENT))
# A served model name reaches vllm serve, a label and the clients' requests: printable, no spaces.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,200}")


def _check_names(settings):
    """Refuse names that would become flags, paths or new lines in the rendered script, before anything runs."""
    checks = (("vllm_server_container_name", settings["container_name"], CONTAINER_NAME,
               "letters, digits, '_', '.' and '-', starting with a letter or digit (Docker's rule)"),
              ("fleet_image", settings["image"], IMAGE_REFERENCE,
               "a registry reference such as quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"),
              ("vllm_server_served_name", settings["served_name"], SERVED_NAME,
               "letters, digits and '_.:/-', no spaces, starting with a letter or digit"))
    for variable, value, pattern, expected in checks:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise AnsibleFilterError("%s is %s: expected %s. Fix: set %s to such a value"
                                     % (variable, json.dumps(value), expected, variable))


def _check_env(settings):
    """Refuse an environment variable the image's release must not get on 310P (the release table says why)."""
    unsupported = sorted(set(settings["env"]) & set(settings["env_unsupported"]))
    if unsupported:
        raise AnsibleFilterError("vllm_server_env or vllm_server_extra_env sets %s, which %s must not get on 310P: %s. "
                                 "Fix: remove %s from both" % (
                                     ", ".join(unsupported), settings["image"],
                                     "; ".join("%s: %s" % (name, settings["env_unsupported"][name].strip())
                                               for name in unsupported), ", ".join(unsupported)))


def _usable_chips(ascend):
    """Chips of the healthy cards: a card with a chip not OK or a chip fault cannot hold a model shard."""
    excluded = set(ascend["unhealthy_npu_ids"])
    chips = [chip for chip in ascend.get("chips", []) if chip["npu_id"] not in excluded]
    missing = [chip for chip in chips if not chip.get("device")]
    if missing:
        raise AnsibleFilterError("no /dev/davinciN is known for NPU %s chip %s: run preflight (npu_facts) first"
                                 % (missing[0]["npu_id"], missing[0]["chip_id"]))
    return sorted(chips, key=lambda chip: chip["logic_id"])


def _instance_cpus(groups, layout, cpu_binding, online_cpus):
    """The CPUs each instance of a per_card or per_chip plan is confined to (None: not confined), by name.

    vLLM-Ascend binds each worker to CPUs of its chip's NUMA affinity (`npu-smi info -t topo`), as seen from
    inside its container: containers whose chips share a NUMA node would pin to the same cores. With
    cpu_binding cpuset, instances that share an affinity get equal, disjoint slices of it; vLLM-Ascend then binds
    within its slice (it intersects the affinity with the CPUs the container may use). Offline CPUs, which
    Docker refuses in a cpuset, are left out when the facts know the online ones; an instance a pool has no CPU
    left for is not confined.
    """
    if layout == "single" or cpu_binding != "cpuset":
        return {name: None for name, _chips in groups}
    affinity = {}
    for name, chips in groups:
        pool = set(cpu for chip in chips for cpu in chip.get("cpu_affinity") or [])
        if online_cpus:
            pool &= set(online_cpus)
        if pool and all(chip.get("cpu_affinity") for chip in chips):
            affinity[name] = tuple(sorted(pool))
    sharing = {}
    for name, _chips in groups:
        if name in affinity:
            sharing.setdefault(affinity[name], []).append(name)
    cpus = {name: None for name, _chips in groups}
    for pool, names in sharing.items():
        for index, name in enumerate(names):
            cpus[name] = list(pool[index * len(pool) // len(names):(index + 1) * len(pool) // len(names)]) or None
    return cpus


def cpu_list(cpus):
    """0-11,24-35: the form --cpuset-cpus takes."""
    ranges = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(low) if low == high else "%d-%d" % (low, high) for low, high in ranges)


LAYOUTS = ("single", "per_card", "per_chip", "auto")


def _fit_fixes(estimate):
    """What would make an instance fit, as the refusal's Fix: the settings that can, with the values that would."""
    fixes = ["serve on more chips per instance (vllm_server_tensor_parallel_size, or vllm_server_layout per_card or "
             "single)"]
    if estimate["longest_max_model_len"]:
        fixes.append("lower vllm_server_max_model_len (%d fits)" % estimate["longest_max_model_len"])
    free = estimate["utilization_free"] or 1
    if estimate["gpu_memory_utilization"] > free:
        fixes.append("lower vllm_server_gpu_memory_utilization to at most %s, what is free at start (%s would fit)"
                     % (free, estimate["utilization_needed"]))
    elif estimate["utilization_needed"] <= free:
        fixes.append("raise vllm_server_gpu_memory_utilization (%s would fit; at most %s is free at start)"
                     % (estimate["utilization_needed"], free))
    fixes.append("if the estimate is wrong for this model, lower vllm_server_fit_reserve_gib or set "
                 "vllm_server_fit_check false")
    return "Fix: " + "; or ".join(fixes)


def _groups(layout, base_name, chips):
    """(instance name, its chips) of a layout: every chip in one, one per card, or one per chip."""
    if layout == "single":
        return [(base_name, chips)]
    if layout == "per_chip":
        return [("%s-npu%s-chip%s" % (base_name, chip["npu_id"], chip["chip_id"]), [chip]) for chip in chips]
    npu_ids = []
    for chip in chips:
        if chip["npu_id"] not in npu_ids:
            npu_ids.append(chip["npu_id"])
    return [("%s-npu%s" % (base_name, npu_id), [c for c in chips if c["npu_id"] == npu_id]) for npu_id in npu_ids]


def _estimates(groups, tensor_parallel_size, settings, processes):
    """The fit estimate of each instance of groups (None where the chips' memory or the model is unknown)."""
    fit_settings = dict(max_model_len=settings["max_model_len"], reserve_gib=settings["fit_reserve_gib"],
                        gpu_memory_utilization=settings["gpu_memory_utilization"],
                        tensor_parallel_size=tensor_parallel_size)
    return [model_fit.fit(settings["model"], chips, fit_settings, processes) for _name, chips in groups]


def _choose_layout(chips, settings, processes):
    """auto: (layout, why). One instance per chip where the model fits a chip with the stated margin to spare,
    one per card otherwise, or when the estimate cannot be made."""
    estimates = _estimates(_groups("per_chip", settings["container_name"], chips), 1, settings, processes)
    if None in estimates:
        return "per_card", ("auto: per_card, as the fit on one chip cannot be estimated (%s)" % (
            "the model's footprint is not known: its folder is not complete on the host yet"
            if not settings["model"] else "npu-smi reports no memory for a chip"))
    margin = float(settings["fit_margin"])
    tightest = max(estimates, key=lambda estimate: estimate["need_gib"] / estimate["budget_gib"])
    if all(model_fit.within_margin(estimate, margin) for estimate in estimates):
        return "per_chip", "auto: per_chip, as the model fits one chip with %d%% to spare: %s" % (
            margin * 100, model_fit.describe(tightest))
    return "per_card", "auto: per_card, as the model does not fit one chip with %d%% to spare: %s" % (
        margin * 100, model_fit.describe(tightest))


def vllm_server_plan(ascend, settings):
    """The serving plan of one host, as recorded in its plan file: what each instance maps and serves, how it was
    laid out, and whether each instance fits its chips (module_utils/model_fit.py), refused here when one does not.

    settings: host, layout, container_name, port, tensor_parallel_size, image, served_name, cpu_binding, the
    containers' env with the names the image's release must not get (env_unsupported, from the release table), and
    for the fit: model (model_files' footprint, or None), max_model_len, gpu_memory_utilization, fit_reserve_gib,
    fit_margin, fit_check.
    """
    _check_names(settings)
    _check_env(settings)
    if ascend.get("missing_manager_devices"):
        raise AnsibleFilterError("%s missing on %s: every vLLM container needs them. Fix: reinstall the Ascend "
                                 "driver (it creates them) and reboot" % (
                                     ", ".join(ascend["missing_manager_devices"]), settings["host"]))
    chips = _usable_chips(ascend)
    if not chips:
        raise AnsibleFilterError("no usable NPU chip on %s (cards left out as unhealthy: %s)" % (
            settings["host"], ascend["unhealthy_npu_ids"]))
    asked = settings["layout"]
    if asked not in LAYOUTS:
        raise AnsibleFilterError("vllm_server_layout %r: expected one of %s" % (asked, ", ".join(LAYOUTS)))
    processes = ascend.get("processes") or []
    layout, why = _choose_layout(chips, settings, processes) if asked == "auto" else (asked, "asked for: %s" % asked)
    groups = _groups(layout, settings["container_name"], chips)
    # One chip holds a whole instance: tensor parallelism 1, whatever the setting says for the other layouts.
    tensor_parallel_size = 1 if layout == "per_chip" else int(settings["tensor_parallel_size"])
    estimates = _estimates(groups, tensor_parallel_size, settings, processes)
    cpus = _instance_cpus(groups, layout, settings["cpu_binding"], ascend.get("online_cpus"))
    instances = []
    for index, ((name, group), estimate) in enumerate(zip(groups, estimates)):
        if tensor_parallel_size > len(group):
            raise AnsibleFilterError(
                "vllm_server_tensor_parallel_size is %d but instance %s has %d chip(s) (%s). Fix: lower the "
                "tensor parallel size, or use layout single to span cards" % (
                    tensor_parallel_size, name, len(group),
                    ", ".join("NPU %s chip %s" % (c["npu_id"], c["chip_id"]) for c in group)))
        if estimate and not estimate["fits"] and settings["fit_check"]:
            # Refused before any container changes: vLLM would fail at load, minutes later, in a restart loop.
            raise AnsibleFilterError("instance %s on %s does not fit its chips (layout %s): %s. %s" % (
                name, settings["host"], layout, model_fit.describe(estimate), _fit_fixes(estimate)))
        instances.append({
            "name": name,
            "port": int(settings["port"]) + index,
            "npu_ids": sorted(set(chip["npu_id"] for chip in group)),
            "devices": [chip["device"] for chip in group],
            "logic_ids": [chip["logic_id"] for chip in group],
            "cpus": cpus[name],
            "tensor_parallel_size": tensor_parallel_size,
            "fit": estimate,
        })
    mapped = [device for instance in instances for device in instance["devices"]]
    twice = sorted(device for device in set(mapped) if mapped.count(device) > 1)
    if twice:
        # A chip opened by a second container fails it at start (drvRet=87, "resources are busy").
        raise AnsibleFilterError("the plan of %s maps a chip twice (%s): the facts give two chips one device node. "
                                 "Fix: run preflight and check `npu-smi info -t phyid-remap`" % (
                                     settings["host"], ", ".join(twice)))
    return {"host": settings["host"], "layout": layout, "layout_reason": why, "image": settings["image"],
            "served_name": settings["served_name"], "excluded_npu_ids": sorted(ascend["unhealthy_npu_ids"]),
            "manager_devices": sorted(ascend["manager_devices"]), "instances": instances}


def vllm_server_docker_run(instance, plan, settings):
    """The docker run of one instance as lines of arguments, one option per line, as an operator writes it.

    The config-hash label is not among them: it is the hash of these lines, added where the script is written.
    """
    lines = [[settings["docker_bin"], "run", "--detach", "--name", instance["name"]],
             ["--restart", settings["restart_policy"]],
             ["--label", "%s=%s" % (label_name(settings["label_prefix"], INSTANCE_LABEL), instance["name"])],
             ["--label", "%s=%s" % (label_name(settings["label_prefix"], HOST_LABEL), plan["host"])],
             # Read by the benchmark to find what each container serves, and where.
             ["--label", "%s=%d" % (label_name(settings["label_prefix"], PORT_LABEL), instance["port"])],
             ["--label", "%s=%s" % (label_name(settings["label_prefix"], SERVED_NAME_LABEL), plan["served_name"])],
             ["--shm-size", settings["shm_size"]]]
    if settings["privileged"]:
        lines.append(["--privileged"])
    if instance.get("cpus"):
        lines.append(["--cpuset-cpus", cpu_list(instance["cpus"])])
    for device in instance["devices"]:
        lines.append(["--device", "%s:/dev/%s" % (device, device.rsplit("/", 1)[-1])])
    for device in plan["manager_devices"]:
        lines.append(["--device", "%s:/dev/%s" % (device, device.rsplit("/", 1)[-1])])
    for source, target, mode, _variable in vllm_server_mounts(settings):
        lines.append(["-v", "%s:%s%s" % (source, target, ":" + mode if mode else "")])
    lines.append(["-p", "%s:%d:%d" % (settings["bind_address"], instance["port"], settings["container_port"])])
    if settings["log_driver"]:
        # The options are the driver's: a daemon's own driver (journald, syslog) would refuse json-file's.
        lines.append(["--log-driver", settings["log_driver"]])
        for key, value in sorted(settings["log_options"].items()):
            lines.append(["--log-opt", "%s=%s" % (key, value)])
    env = dict(vllm_server_env(settings), **settings["env"])  # the release's, then the operator's
    if settings["jemalloc_path"]:
        # The image sets LD_PRELOAD only in ~/.bashrc, which the container's non-interactive command never reads.
        env["LD_PRELOAD"] = settings["jemalloc_path"]
    if settings["privileged"]:
        # A privileged container sees every chip of the host and would open logical 0 and 1, whatever it maps
        # (vllm-ascend issue #6942): only the runtime's visible devices keep it to its own chips.
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(logic_id) for logic_id in instance["logic_ids"])
    for key, value in sorted(env.items()):
        lines.append(["-e", "%s=%s" % (key, value)])
    if settings["env_file"]:
        lines.append(["--env-file", settings["env_file"]])
    # `--` ends docker's options: the image can never be read as one.
    lines.append(["--", plan["image"]])
    return lines + vllm_serve_lines(plan, instance, settings, cpu_binding_off=settings["cpu_binding"] == "disabled" or (
        settings["cpu_binding"] == "cpuset" and plan["layout"] != "single" and not instance.get("cpus")))


def vllm_server_env(settings):
    """What the role sets in every container's environment beside vllm_server_env (which may override any)."""
    # vLLM gives up on its engine after VLLM_ENGINE_READY_TIMEOUT_S (vllm/envs.py, 600 s): it waits as long as the
    # role does, or a slow load would end in a restart loop instead of serving.
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": str(settings["ready_timeout"])}
    if settings["hub_offline"]:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if not settings["usage_stats"]:
        env.update(VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


def vllm_server_mounts(settings):
    """The host paths every instance mounts: (source, target in the container, mode, the variable naming it).

    The driver's files are mounted read-only: preflight runs the host's npu-smi as root, so no container may
    replace it. The cache is the containers' own folder, not the host's /root/.cache.
    """
    driver_home = settings["driver_home"].rstrip("/")
    return [(settings["dcmi_dir"], CONTAINER_PATHS["dcmi"], "ro", "fleet_dcmi_dir"),
            (settings["npu_smi"], CONTAINER_PATHS["npu_smi"], "ro", "fleet_npu_smi"),
            (driver_home + "/lib64/", CONTAINER_PATHS["driver_lib64"], "ro", "fleet_driver_home"),
            (driver_home + "/version.info", CONTAINER_PATHS["driver_version"], "ro", "fleet_driver_home"),
            (settings["install_info"], CONTAINER_PATHS["install_info"], "ro", "fleet_install_info"),
            (settings["cache_dir"], CONTAINER_PATHS["cache"], "", "vllm_server_cache_dir"),
            (settings["model_dir"], settings["model_container_dir"], "ro", "fleet_model_dir")]


def vllm_server_required_paths(settings):
    """The mount sources that must exist before any instance starts, each with the variable that sets it (the cache
    folder is made by vllm_plan): what the vllm_plan module checks."""
    return {source: variable for source, _target, _mode, variable in vllm_server_mounts(settings)
            if variable != "vllm_server_cache_dir"}


def vllm_serve_lines(plan, instance, settings, cpu_binding_off):
    """`vllm serve` and its flags: the seed's, each from a variable, plus the operator's extras.

    cpu_binding_off: turn vLLM-Ascend's own CPU binding off (asked for, or an instance of several whose chips'
    affinity is unknown, which would slice the same CPUs as every other instance).
    """
    lines = [["vllm", "serve", settings["model_container_dir"]],
             ["--served-model-name", plan["served_name"]],
             ["--gpu-memory-utilization", str(settings["gpu_memory_utilization"])],
             ["--max-model-len", str(settings["max_model_len"])],
             ["--tensor-parallel-size", str(instance["tensor_parallel_size"])]]
    if settings["enforce_eager"]:
        lines.append(["--enforce-eager"])
    elif settings["compilation_config"]:
        # Graph mode as the image's release runs it on 310P (the release table's compilation_config).
        lines.append(["--compilation-config", json.dumps(settings["compilation_config"], sort_keys=True)])
    lines.append(["--dtype", settings["dtype"]])
    if settings["container_port"] != 8000:
        lines.append(["--port", str(settings["container_port"])])
    if settings["max_pixels"]:
        # A pair: vLLM 0.18's image processor (transformers 4.57) ignores max_pixels without min_pixels.
        lines.append(["--mm-processor-kwargs", json.dumps({"min_pixels": int(settings["min_pixels"]),
                                                           "max_pixels": int(settings["max_pixels"])})])
    # vLLM keeps the last --additional-config only: the release's keys and the role's go in one.
    additional_config = dict(settings["additional_config"])
    if cpu_binding_off:
        additional_config["enable_cpu_binding"] = False
    if additional_config:
        lines.append(["--additional-config", json.dumps(additional_config, sort_keys=True)])
    if settings["extra_args"]:
        lines.append([str(arg) for arg in settings["extra_args"]])
    return lines


def _results(register):
    """The per-item results of a looped task's register (none when the task was skipped)."""
    return [result for result in (register or {}).get("results", []) if not result.get("skipped")]


def vllm_server_outcomes(applied, *probes, rejected=None):
    """Each instance as vllm_instance left it (action, set_aside) with `changes`: the run changes something of it
    (starts or replaces its container, recovers what an interrupted run set aside, or rewrites its files); `error`:
    why it did not start or serve, or None when it serves; and `rejected`: the canary gate rejected it (vllm_canary).

    applied: the register of the vllm_instance task (in check mode, of the decision). probes: the registers of the
    probes as launched (an async job's id, or in check mode the probe's own result), as async_status finished
    them (their item is the launch result), or as an async task polled to its end returned them.
    rejected: {instance name: why the canary gate rejected it}.
    """
    rejected = rejected or {}
    errors = {}
    for register in probes:
        for result in _results(register):
            launched_as_job = ("vllm_server_instance" in result and result.get("ansible_job_id")
                               and not result.get("finished"))
            instance = result.get("vllm_server_instance") or result.get("item", {}).get("vllm_server_instance")
            if not instance or launched_as_job:
                continue  # what async_status gave back of the job tells
            # The probe tasks run with failed_when false, which resets `failed`: a failed probe is one with a
            # message (vllm_probe returns none when the instance serves, a launch that failed does), or an
            # async job that never finished.
            if "msg" in result:
                errors.setdefault(instance["name"], result["msg"])
            elif "finished" in result and not result["finished"]:
                errors.setdefault(instance["name"], "the readiness check did not finish within the wait limit "
                                                    "(vllm_server_ready_timeout plus the smoke request)")
    outcomes = []
    for result in _results(applied):
        instance = result["vllm_server_instance"]
        name = instance["name"]
        changes = result["action"] != "keep" or bool(result.get("recovered") or result.get("files_changed"))
        outcomes.append(dict(instance, action=result["action"], set_aside=result["set_aside"], changes=changes,
                             error=result.get("error") or errors.get(name) or rejected.get(name),
                             rejected=name in rejected))
    return outcomes


def vllm_server_failures(outcomes, finished, restored, host):
    """What went wrong on the host, one sentence per instance that does not serve, saying what serves instead.

    finished: the register of the commit-or-restore task; restored: of the probes of the containers put back.
    """
    put_back = set(result["vllm_server_instance"]["name"] for result in _results(finished) if result.get("restored"))
    probed = dict((result["vllm_server_instance"]["name"], result) for result in _results(restored))
    failures = []
    for outcome in outcomes:
        name, error = outcome["name"], (outcome["error"] or "").strip()
        if outcome["error"] is None:
            continue
        if outcome["action"] == "failed":
            failures.append("%s on %s did not start: %s ---- The serving container was not touched." % (
                name, host, error))
        elif outcome["action"] != "replace":
            failures.append("%s on %s does not serve: %s" % (name, host, error))
        elif outcome.get("rejected") and name in put_back:
            failures.append("%s on %s served but was rolled back: %s ---- The previous container %s." % (
                name, host, error, "does not serve: %s" % probed[name]["msg"] if probed.get(name, {}).get("msg")
                else "is serving again"))
        elif name not in put_back:
            failures.append("%s on %s did not start: %s ---- There was no previous container to restore." % (
                name, host, error))
        elif probed.get(name, {}).get("msg"):
            failures.append("%s on %s did not start: %s ---- The previous container was put back but does not "
                            "serve: %s" % (name, host, error, probed[name]["msg"]))
        else:
            failures.append("%s on %s did not start: %s ---- The previous container is serving again." % (
                name, host, error))
    return failures


class FilterModule:
    def filters(self):
        return {"vllm_server_plan": vllm_server_plan, "vllm_server_docker_run": vllm_server_docker_run,
                "vllm_server_required_paths": vllm_server_required_paths,
                "vllm_server_outcomes": vllm_server_outcomes, "vllm_server_failures": vllm_server_failures}
