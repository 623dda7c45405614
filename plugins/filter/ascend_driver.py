"""The driver and firmware plan of a host, and the check after: from its gathered facts to what must change.

Huawei's order (CANN install guide, "安装NPU驱动和固件"; HDK upgrade guide): on a host without a driver, the
driver first, then the firmware; over an installed driver (upgrade, overwrite, rollback), the firmware first,
then the driver, whose firmware upgrade tool the firmware package needs. A package goes on with `--full`
(and `--install-for-all` for the driver) where its component was never installed, `--upgrade` otherwise;
`--nox11 --quiet` always (`--quiet` also accepts the EULA). Firmware takes effect only after a reboot; a driver
takes effect at once unless its PCIe hot reset fails (exit code 2), and then after a reboot.
"""

from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import chip_holders
from ansible_collections.ascend.fleet.plugins.plugin_utils.mounts import free_bytes
from ansible_collections.ascend.fleet.plugins.plugin_utils.versions import version_key

COMPONENTS = ("driver", "firmware")


def ascend_driver_package_name(component, version, chip, architecture):
    """The file name Huawei publishes a package under: the driver names its architecture, the firmware not."""
    if component == "driver":
        return "Ascend-hdk-%s-npu-driver_%s_linux-%s.run" % (chip, version, architecture)
    return "Ascend-hdk-%s-npu-firmware_%s.run" % (chip, version)


def same(left, right):
    return left is not None and right is not None and str(left).lower() == str(right).lower()


def running_firmware(facts):
    """Firmware every card runs (npu-smi -t board), or none known when npu-smi did not answer."""
    found = sorted({card["firmware_version"] for card in facts.get("cards", []) if card.get("firmware_version")})
    return found


def options(component, installed):
    if installed:
        return ["--nox11", "--upgrade", "--quiet"]
    if component == "driver":
        return ["--nox11", "--full", "--install-for-all", "--quiet"]
    return ["--nox11", "--full", "--quiet"]


def holder_problems(holders, label_prefix):
    """What holds a chip and is not this collection's: its hot reset would fail, and a firmware flash under a
    running job is not a risk to take. This collection's containers, and the processes inside them, are stopped
    first (tasks/drain.yml)."""
    held = chip_holders(holders, label_prefix)
    problems = ["container %s (image %s) maps %s: stop it (`docker stop %s`) and keep it from restarting until the "
                "driver run is over" % (container["name"], container.get("image"), ", ".join(container["held"]),
                                        container["name"])
                for container in held["containers"] if not container["ours"]]
    problems += ["process %s (pid %d%s) holds %s: stop it" % (
        process["name"], process["pid"],
        ", in container %s" % process["container_id"][:12] if process.get("container_id") else "",
        ", ".join(process["devices"]))
        for process in held["processes"] if not process["ours"]]
    return problems


def disk_problems(paths, mounts, need_mb):
    problems = []
    for path in paths:
        available, mount = free_bytes(path, mounts)
        if available is not None and available < need_mb * 1024 ** 2:
            problems.append("%d MB free on %s (holding %s); the packages need %d MB. Fix: free space on %s" % (
                available // 1024 ** 2, mount, path, need_mb, mount))
    return problems


def ascend_driver_plan(facts, settings):
    """What the role will do on one host: each component's installed and wanted version and action, the packages
    in Huawei's order with their options, whether a reboot follows, and why it must not go on (problems)."""
    wanted = {"driver": settings["driver_version"], "firmware": settings["firmware_version"]}
    installed = {"driver": facts.get("driver_version_file"), "firmware": facts.get("firmware_version_file")}
    loaded = facts.get("driver_version") if facts.get("ready") else None
    running = running_firmware(facts)
    problems, warnings = [], []

    actions = {}
    for component in COMPONENTS:
        have, want = installed[component], wanted[component]
        if same(have, want):
            actions[component] = "none"
        elif have is None:
            actions[component] = "install"
        elif version_key(want) < version_key(have):
            actions[component] = "rollback"
            floor = settings["rollback_floor"][component]
            if not settings["allow_rollback"]:
                problems.append("%s %s is installed and %s is older: a rollback. Fix: set "
                                "ascend_driver_allow_rollback: true to roll back on purpose (the firmware goes "
                                "first), or set fleet_%s_version to the installed release" % (
                                    component, have, want, component))
            elif version_key(want) < version_key(floor):
                problems.append("%s %s is older than %s, the oldest release an Atlas 300I Duo is supported with on "
                                "the OSes it is tested on. Fix: choose a release of %s or later" % (
                                    component, want, floor, floor))
        else:
            actions[component] = "upgrade"

    order = ("firmware", "driver") if installed["driver"] else ("driver", "firmware")
    steps = [{"component": component, "from": installed[component], "to": wanted[component],
              "package": settings["packages"][component], "options": options(component, installed[component])}
             for component in order if actions[component] != "none"]

    # A reboot already owed: firmware installed but not yet running, or a driver installed but not loaded.
    pending = []
    if actions["firmware"] == "none" and running and running != [wanted["firmware"]]:
        pending.append("firmware %s is installed but the chips run %s" % (wanted["firmware"], ", ".join(running)))
    if actions["driver"] == "none" and installed["driver"] and not same(loaded, installed["driver"]):
        pending.append("driver %s is installed but %s" % (
            installed["driver"], "%s is loaded" % loaded if loaded else "npu-smi does not answer"))
    if any(step["component"] == "firmware" for step in steps):
        reboot = "needed: the new firmware runs only after a reboot"
    elif pending:
        reboot = "needed: " + "; ".join(pending)
    elif steps:
        reboot = "only if the driver's hot reset fails (the installer exits 2)"
    else:
        reboot = "no"

    holders = holder_problems(settings["holders"], settings["label_prefix"]) if steps or pending else []
    problems += ["something else holds a chip: %s" % holder for holder in holders]
    if steps:
        problems += disk_problems(settings["disk_paths"], settings["mounts"], settings["min_free_mb"])
        problems += ["%s is not on the controller. Fix: download it (hiascend.com, Atlas 300I Duo, HDK, this host's "
                     "architecture) into %s, or set ascend_driver_packages_url to a mirror folder that has it" % (
                         step["package"], settings["packages_dir"])
                     for step in steps if step["package"] in settings.get("missing_packages", [])]
    if steps and settings["secure_boot"].lower().startswith("secureboot enabled"):
        warnings.append("Secure Boot is enabled: the driver's DKMS-built kernel modules load only if they are "
                        "signed with a key the firmware trusts (mokutil --import), or with Secure Boot off")
    if steps and facts.get("unhealthy_npu_ids"):
        warnings.append("NPU %s not healthy before the change: compare after" % ", ".join(
            str(npu_id) for npu_id in facts["unhealthy_npu_ids"]))

    if problems:
        state = "refused"
    elif not steps:
        state = "reboot" if pending else "current"
    elif installed["driver"] is None:
        state = "install"
    elif "rollback" in actions.values():
        state = "rollback"
    else:
        state = "upgrade"
    return {
        "state": state,
        "driver": {"installed": installed["driver"], "loaded": loaded, "wanted": wanted["driver"],
                   "action": actions["driver"]},
        "firmware": {"installed": installed["firmware"], "running": running, "wanted": wanted["firmware"],
                     "action": actions["firmware"]},
        "steps": steps,
        "reboot": reboot,
        "reboot_owed": bool(pending),
        # Whether a reboot follows whatever the installers say; an exit code 2 adds one (tasks/reboot.yml).
        "reboot_needed": reboot.startswith("needed"),
        "secure_boot": settings["secure_boot"],
        "problems": problems,
        "warnings": warnings,
    }


def describe(host, plan):
    """One line per host for the fleet's plan."""
    if plan["state"] == "current":
        return "%s: current (driver %s, firmware %s): nothing to do" % (
            host, plan["driver"]["wanted"], plan["firmware"]["wanted"])
    verbs = {"install": "install", "upgrade": "upgrade", "rollback": "roll back"}
    steps = ", then ".join("%s %s %s -> %s (%s)" % (
        step["component"], verbs[plan[step["component"]]["action"]], step["from"] or "none", step["to"],
        step["package"]) for step in plan["steps"])
    line = "%s: %s: %s; reboot %s; Secure Boot: %s" % (
        host, plan["state"], steps or "no package", plan["reboot"], plan["secure_boot"])
    if plan["problems"]:
        line += ". REFUSED: " + " | ".join(plan["problems"])
    return line


def ascend_driver_summary(hostvars, hosts, plan_var="ascend_driver_plan"):
    """The fleet's plan, one line per host, hosts that could not be planned named too."""
    lines = []
    for host in hosts:
        plan = hostvars[host].get(plan_var)
        lines.append(describe(host, plan) if plan else "%s: not planned (its checks failed above)" % host)
    return lines


def ascend_driver_verify(facts, settings):
    """What is still wrong after the change: npu-smi must answer, every card run the wanted driver and firmware,
    every chip be healthy, and the driver's kernel module be loaded."""
    wanted_driver, wanted_firmware = settings["driver_version"], settings["firmware_version"]
    if not facts.get("ready"):
        return ["npu-smi does not list the chips: %s" % "; ".join(facts.get("problems") or ["no answer"])]
    problems = []
    if not same(facts.get("driver_version"), wanted_driver):
        problems.append("the loaded driver is %s, not %s" % (facts.get("driver_version"), wanted_driver))
    for card in facts.get("cards", []):
        for label, key, want in (("driver", "software_version", wanted_driver),
                                 ("firmware", "firmware_version", wanted_firmware)):
            if not same(card.get(key), want):
                problems.append("NPU %s runs %s %s, not %s" % (card["npu_id"], label, card.get(key), want))
    if facts.get("unhealthy_npu_ids"):
        problems.append("NPU %s not healthy (npu-smi info -t health -i <NPU ID>)" % ", ".join(
            str(npu_id) for npu_id in facts["unhealthy_npu_ids"]))
    if settings.get("module_loaded") is False:
        problems.append("the driver's kernel module %s is not loaded (lsmod)" % settings["module"])
    return problems


class FilterModule(object):
    def filters(self):
        return {
            "ascend_driver_package_name": ascend_driver_package_name,
            "ascend_driver_plan": ascend_driver_plan,
            "ascend_driver_summary": ascend_driver_summary,
            "ascend_driver_verify": ascend_driver_verify,
        }
