"""Preflight verdicts: from a host's gathered facts and the role's settings to failures and warnings.

Kept in Python rather than Jinja so every rule reads as one function and is unit-tested. Each finding says
which check, what was found, what is required and how to fix it; the role adds the host name.
"""
import json
import os
import re

from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import (
    INSTANCE_LABEL,
    deploy_prefixes,
    label_name,
)
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import chip_holders
from ansible_collections.ascend.fleet.plugins.plugin_utils.mounts import free_bytes
from ansible_collections.ascend.fleet.plugins.plugin_utils.versions import version_key

# Known trouble with 24.x drivers (vLLM-Ascend issue 3860, and the seed's experience with 24.x + vLLM 0.11.0),
# and the driver families CANN 8.5 (inside the v0.18.0rc1 image) supports.
DRIVER_24_WHY = ("24.x drivers are known to crash vLLM-Ascend on large images and to make inference extremely "
                 "slow (vllm-ascend issue 3860); CANN 8.5 in the v0.18.0rc1 image supports driver families "
                 "25.0, 25.2, 25.3 and 25.5 only")
HELD_CHIP_WHY = "a chip held by another process makes the vLLM container fail with dcmi error -8020"
HELD_BY_CONTAINER_WHY = ("a chip opens in one container only: the vLLM container would fail at start (drvRet=87, "
                         "resources are busy)")


# Where each distribution's hosts get a Python that ansible-core's modules run on (ascend_preflight_python).
PYTHON_FIXES = {
    "kylin": "Kylin V10's python3 is 3.7: upgrade the host to a Kylin release whose python3 is 3.8 or later",
    "openEuler": "openEuler 20.03 LTS's python3 is 3.7: upgrade the host to openEuler 22.03 LTS (python3 3.9)",
}
PYTHON_FIX_ANY = "make the host's python3 3.8 or later (its distribution's newer release)"
# Why a Python installed beside the system's does not do: the package tasks run the distribution's dnf or apt
# bindings, which exist for the system's python3 only.
PYTHON_FIX_BESIDE = ("; a Python 3.8+ installed beside it and named by ansible_python_interpreter runs the modules "
                     "but not the package installs (dnf's and apt's bindings are the system python3's): then install "
                     "Docker, HAProxy and the exporters yourself first")
PYTHON_VERSION = re.compile(r"Python (\d+)\.(\d+)(?:\.(\d+))?")


def finding(check, found, required, fix):
    return {"check": check, "found": found, "required": required, "fix": fix,
            "message": "%s: found %s; required %s. Fix: %s" % (check, found, required, fix)}


def version_ok(found, required, policy):
    if found is None:
        return False
    if policy == "minimum":
        return version_key(found) >= version_key(required)
    return str(found).lower() == str(required).lower()


def check_versions(facts, settings):
    findings = []
    policy = settings["version_policy"]
    wording = "exactly" if policy == "exact" else "at least"
    driver_target = settings["driver_version"]
    firmware_target = settings["firmware_version"]
    upgrade = "install Ascend driver %s and firmware %s (the HDK packages for Atlas 300I Duo), then reboot" % (
        driver_target, firmware_target)
    driver = facts.get("driver_version") or facts.get("driver_version_file")
    if driver is None:
        findings.append(finding("driver version", "no driver version (npu-smi gave none, version.info unreadable)",
                                "%s %s" % (wording, driver_target), upgrade))
    elif str(driver).startswith("24."):
        findings.append(finding("driver version", "%s (a 24.x driver)" % driver,
                                "%s %s" % (wording, driver_target), "%s. %s" % (DRIVER_24_WHY, upgrade)))
    elif not version_ok(driver, driver_target, policy):
        findings.append(finding("driver version", driver, "%s %s" % (wording, driver_target), upgrade))
    loaded, installed = facts.get("driver_version"), facts.get("driver_version_file")
    if loaded and installed and loaded.lower() != installed.lower():
        findings.append(finding("driver loaded vs installed", "npu-smi reports %s but version.info says %s"
                                % (loaded, installed), "the installed driver to be the one running",
                                "reboot the host to load the driver that was installed"))
    cards = [card for card in facts.get("cards", []) if card.get("firmware_version")]
    firmware_found = ["%s on NPU %s" % (card["firmware_version"], card["npu_id"]) for card in cards
                      if not version_ok(card["firmware_version"], firmware_target, policy)]
    if not cards and not version_ok(facts.get("firmware_version"), firmware_target, policy):
        firmware_found = [str(facts.get("firmware_version") or "no firmware version (board query and "
                                                               "firmware version.info gave none)")]
    if firmware_found:
        findings.append(finding("firmware version", ", ".join(firmware_found),
                                "%s %s" % (wording, firmware_target), upgrade))
    return findings


def inferred_product(card, chips):
    """Product type of a card: `-t product` when it answered, else from its 310P3 chip count."""
    if card.get("product_type"):
        return card["product_type"]
    names = {chip.get("name") for chip in chips if chip.get("npu_id") == card["npu_id"]}
    if names == {"310P3"}:
        return {2: "Atlas 300I Duo", 1: "Atlas 300I Pro"}.get(card.get("chip_count"))
    return None


def check_products(facts, settings):
    allowed = settings["allowed_products"]
    wrong = []
    for card in facts.get("cards", []):
        product = inferred_product(card, facts.get("chips", []))
        if product not in allowed:
            wrong.append("NPU %s is %s" % (card["npu_id"], product or "of unknown type (chips: %s)" % ", ".join(
                sorted({c["name"] for c in facts["chips"] if c["npu_id"] == card["npu_id"] and c.get("name")}))))
    if not wrong:
        return []
    return [finding("product type", "; ".join(wrong), "one of: %s" % ", ".join(allowed),
                    "serve on Atlas 300I Duo cards (310P3), or add the product to ascend_preflight_allowed_products "
                    "if the image supports it")]


def check_health(facts, settings):
    """Judge the cards npu_facts found unhealthy; the facts hold the verdict so the serving plan reads the same."""
    unhealthy = facts["unhealthy_npu_ids"]
    if not unhealthy:
        return [], [], []
    problems = {card["npu_id"]: card["health_problems"] for card in facts["cards"]}
    found = "; ".join("NPU %s: %s" % (npu_id, ", ".join(problems[npu_id])) for npu_id in unhealthy)
    fix = ("check `npu-smi info -t health -i <NPU ID>` and `dmesg`; reset the card (`npu-smi set -t reset -i <NPU "
           "ID> -c 0`) or replace it")
    if settings["unhealthy_chip_action"] == "exclude_card":
        healthy = [card for card in facts["cards"] if card["npu_id"] not in unhealthy]
        if not healthy:
            return [finding("chip health", found, "at least one healthy card to serve on", fix)], [], unhealthy
        return [], [finding("chip health", found + " (card left out of the serving plan)", "every chip OK",
                            fix)], unhealthy
    fix += "; or set ascend_preflight_unhealthy_chip_action: exclude_card to serve on the other cards"
    return [finding("chip health", found, "every chip OK with no chip fault", fix)], [], []


def check_device_numbering(facts):
    """Without the physical ids (an npu-smi lacking `-t phyid-remap`) a chip's node is only known where the node
    numbers are the logic ids (npu_facts' device_numbering); otherwise a container would get another chip than
    planned, or none."""
    if facts.get("device_numbering", "phy_id") != "unknown":
        return []
    logic_ids = sorted(chip["logic_id"] for chip in facts.get("chips", []) if chip.get("logic_id") is not None)
    return [finding("device numbering", "nodes %s for chips with logic ids %s, and npu-smi cannot tell which node "
                    "is which chip (%s)" % (" ".join(facts.get("devices", [])) or "none", " ".join(map(str, logic_ids)),
                                            facts.get("phyid_remap_error") or "no `npu-smi info -t phyid-remap`"),
                    "each chip's /dev/davinciN known",
                    "install an Ascend driver whose npu-smi answers `npu-smi info -t phyid-remap -p <N>` "
                    "(`npu-smi info -h` lists phyid-remap); if a node is missing, reload the driver or reboot (the "
                    "driver creates the nodes when it loads)")]


def check_devices(facts):
    findings = check_device_numbering(facts)
    present = set(facts.get("devices", []))
    # npu_facts gives no device to a chip whose physical id no node has: its node is missing, path unknown.
    missing = ["%s (NPU %s chip %s)" % (chip.get("device") or "a node for logic id %s" % chip["logic_id"],
                                        chip["npu_id"], chip["chip_id"])
               for chip in facts.get("chips", [])
               if chip.get("logic_id") is not None and chip.get("device") not in present]
    # A numbering finding already names the nodes; their guessed paths would only repeat it, wrongly.
    if missing and not findings:
        findings.append(finding("device nodes", "missing %s" % ", ".join(missing),
                                "a /dev/davinciN node for every chip npu-smi lists",
                                "reload the driver or reboot; the driver creates the nodes when it loads"))
    if facts.get("missing_manager_devices"):
        # npu_facts lists every manager device it looks for as either present or missing.
        wanted = sorted(os.path.basename(path) for path in facts["manager_devices"] + facts["missing_manager_devices"])
        findings.append(finding("manager devices", "missing %s" % ", ".join(facts["missing_manager_devices"]),
                                "%s and %s" % (", ".join(wanted[:-1]), wanted[-1]),
                                "reinstall the Ascend driver (it creates them) and reboot"))
    return findings


def check_processes(holders):
    """A finding for the processes on the chips (npu_facts') that are not in this collection's containers."""
    foreign = ["pid %s (%s, %s MB) on NPU %s chip %s" % (p["pid"], p["name"], p.get("memory_mb"), p["npu_id"],
                                                         p["chip_id"])
               for p in holders["processes"] if not p["ours"]]
    if not foreign:
        return []
    return [finding("chip in use", "; ".join(foreign), "no process outside this collection's containers on a chip",
                    "stop that process (`kill <pid>`) or the container running it (`docker ps`); %s"
                    % HELD_CHIP_WHY)]


def check_containers(holders, label_prefix):
    """A finding for each container of another owner that maps one of the host's chips, running or restarting.
    Ours are not among them: the server phase replaces them."""
    findings = []
    for holder in holders["containers"]:
        if holder["ours"]:
            continue
        name = holder["name"]
        state = ", %s" % holder["status"] if holder.get("status") else ""
        fix = ("stop it and keep it stopped (`docker update --restart=no %s && docker stop %s`), or remove it "
               "(`docker rm -f %s`)" % (name, name, name))
        prefixes = deploy_prefixes(holder.get("labels") or {})
        if prefixes:
            fix = ("it is an instance of an earlier deploy of this collection under fleet_label_prefix %s: take "
                   "that deploy away with `ansible-playbook playbooks/teardown.yml -e fleet_label_prefix=%s --limit "
                   "<host>` (it removes the host's serving plan and the instances it names too), or %s" % (
                       prefixes[0], prefixes[0], fix))
        findings.append(finding("chip held by a container", "container %s (image %s%s) maps %s" % (
            name, holder.get("image"), state, ", ".join(holder["held"])),
            "no container but this collection's (label %s) mapping a chip" % label_name(label_prefix, INSTANCE_LABEL),
            "%s; %s" % (fix, HELD_BY_CONTAINER_WHY)))
    return findings


def check_disk(disk_checks, mounts):
    findings = []
    for wanted in disk_checks or []:
        need = float(wanted["min_free_gb"]) * 1024 ** 3
        available, mount = free_bytes(wanted["path"], mounts)
        if available is not None and available < need:
            findings.append(finding("free disk for %s" % wanted["purpose"], "%.1f GB free on %s (holding %s)" % (
                available / 1024.0 ** 3, mount, wanted["path"]), "%s GB" % wanted["min_free_gb"],
                "free space on %s or point the %s path elsewhere" % (mount, wanted["purpose"])))
    return findings


def check_tuning(settings):
    """A warning for each host OS setting that is not as the fleet wants (read by the host_tuning module): serving
    runs, only slower; a setting the host does not have is no finding."""
    return [finding("host tuning", "%s is %s" % (setting["name"], setting["current"]),
                    "%s (fleet_host_tuning_%s, from vLLM-Ascend's tuning guide)" % (
                        setting["wanted"], "governor" if setting["name"] == "cpu_governor" else "sysctls"),
                    "ansible-playbook playbooks/host_tuning.yml applies it for good")
            for setting in settings or [] if setting.get("state") in ("differs", "refused")]


def check_firewalld(probe):
    """A failure where firewalld will drop the ports Docker publishes (the instances) from every other host. Docker
    publishes by DNAT in its own iptables rules; firewalld 0.7 and later accept DNAT'd traffic before their zones
    (`ct status dnat accept`), earlier ones reject it where Docker's bridge is in no zone that accepts it
    (moby/libnetwork#2496), and firewalld 2.3's StrictForwardPorts=yes accepts only the port forwards it made
    itself. Docker 20.10 and later put their bridge into a zone of their own, `docker`; openEuler's and Kylin's
    docker-engine 18.09 does not; an operator may have put it into one that accepts (`trusted`). probe: the lines of
    tasks/host.yml's firewalld probe (state, version, zones, bridge_target: the target of docker0's zone, strict)."""
    fields = dict(line.split("=", 1) for line in (probe or "").splitlines() if "=" in line)
    if fields.get("state", "").strip() != "running":
        return []
    version = fields.get("version", "").strip()
    strict = fields.get("strict", "").strip().lower() in ("yes", "true")
    old = bool(version) and version_key(version) < version_key("0.7")
    bridge_accepted = ("docker" in fields.get("zones", "").split()
                       or fields.get("bridge_target", "").strip() == "ACCEPT")
    if strict:
        found = "firewalld %s with StrictForwardPorts=yes, which accepts no port Docker publishes" % version
        fix = ("set StrictForwardPorts=no in /etc/firewalld/firewalld.conf and restart firewalld, then Docker; or "
               "forward each instance's port in firewalld yourself (firewall-cmd --permanent --add-forward-port)")
    elif old and not bridge_accepted:
        found = ("firewalld %s, which rejects what Docker publishes to a bridge in no zone, and Docker's bridge in "
                 "none" % version)
        fix = ("put Docker's bridge in a zone that accepts: firewall-cmd --permanent --zone=trusted "
               "--add-interface=docker0 && firewall-cmd --reload, then restart Docker; or firewalld 0.7 or later, or "
               "Docker 20.10 or later (docker-ce), which makes its own zone")
    else:
        return []
    return [finding("firewalld and Docker", found, "the instances' published ports reachable from the gateways",
                    fix)]


def ascend_preflight_python(probe, minimum):
    """The verdict on a host's Python from the raw probe's output (tasks/python.yml), before any module runs there:
    {'ok', 'interpreter', 'version', 'os', 'message'}. Lines of the probe: `os=<ID> <PRETTY_NAME>`, then
    `python=<path> <what --version printed>` or `python=` when the host has none."""
    fields = dict(line.split("=", 1) for line in (probe or "").splitlines() if "=" in line)
    os_id, _space, os_name = fields.get("os", "").partition(" ")
    interpreter, _space, answer = fields.get("python", "").partition(" ")
    match = PYTHON_VERSION.search(answer)
    version = ".".join(part for part in match.groups() if part) if match else None
    wanted = tuple(int(part) for part in str(minimum).split("."))
    ok = bool(match) and (int(match.group(1)), int(match.group(2))) >= wanted
    found = ("%s is Python %s" % (interpreter, version) if version else
             "%s answers %r" % (interpreter, answer.strip()[:80]) if interpreter else "no python3")
    on = " on %s" % os_name.strip('"') if os_name else ""
    message = None if ok else finding(
        "Python", found + on, "Python %s or later, which ansible-core runs its modules and this collection's with "
        "(nothing else runs on the host before this check passes)" % minimum,
        PYTHON_FIXES.get(os_id.strip('"'), PYTHON_FIX_ANY) + PYTHON_FIX_BESIDE)["message"]
    return {"ok": ok, "interpreter": interpreter or None, "version": version, "os": os_name.strip('"') or None,
            "message": message}


def ascend_preflight_findings(facts, settings):
    """All verdicts for one host: {'failures': [...], 'warnings': [...], 'excluded_npu_ids': [...]}."""
    failures, warnings, excluded = [], [], []
    label_prefix = settings["label_prefix"]
    # The containers the npu_holders module lists with the processes npu-smi lists on the chips.
    holders = chip_holders({"containers": settings.get("containers"), "processes": facts.get("processes")},
                           label_prefix, facts.get("devices", []))
    architecture = settings.get("architecture")
    if architecture not in settings["allowed_architectures"]:
        failures.append(finding("CPU architecture", architecture, "one of: %s" % ", ".join(
            settings["allowed_architectures"]), "vLLM-Ascend images are published for arm64 and amd64 only"))
    if not facts.get("present"):
        failures.append(finding("npu-smi", "; ".join(facts.get("problems") or ["not found"]), "npu-smi answering",
                                "install the Ascend driver, or set fleet_npu_smi to where npu-smi is"))
    elif not facts.get("ready"):
        failures.append(finding("NPU ready", "; ".join(facts.get("problems") or ["no chip listed"]),
                                "npu-smi info listing the chips", "see the cause above"))
    versions = check_versions(facts, settings)
    (failures if settings["strict"] else warnings).extend(versions)
    if facts.get("ready"):
        failures.extend(check_products(facts, settings))
        health_failures, health_warnings, excluded = check_health(facts, settings)
        failures.extend(health_failures)
        warnings.extend(health_warnings)
        failures.extend(check_devices(facts))
        failures.extend(check_processes(holders))
    # Whether npu-smi answers or not: a container holding a chip is a cause of dcmi errors -8005 and -8020.
    failures.extend(check_containers(holders, label_prefix))
    failures.extend(check_disk(settings.get("disk_checks"), settings.get("mounts")))
    failures.extend(check_firewalld(settings.get("firewalld")))
    warnings.extend(check_tuning(settings.get("tuning")))
    return {"failures": failures, "warnings": warnings, "excluded_npu_ids": excluded,
            "description": describe(facts, architecture)}


def describe(facts, architecture):
    """What the host is, in one line for the summary: CPU, cards, chips, driver, firmware."""
    products = sorted({card.get("product_type") or "unknown product" for card in facts.get("cards", [])})
    return "%s %s; %s card(s) %s, %s chip(s); driver %s, firmware %s" % (
        architecture, facts.get("cpu_model") or "unknown CPU", facts.get("card_count", 0),
        "/".join(products) or "", facts.get("chip_count", 0),
        facts.get("driver_version") or facts.get("driver_version_file") or "unknown",
        facts.get("firmware_version") or "unknown")


def yaml_type(value):
    """The plain type a setting's value was read as (Ansible hands values over in subclasses that carry their
    origin): float for 25.5, whatever the class."""
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def ascend_preflight_setting_problems(driver_version, firmware_version, disk_checks):
    """What is wrong with the role's settings, one sentence each: checked once, before any host is judged."""
    problems = []
    for variable, value, example, why in (
            ("ascend_preflight_driver_version", driver_version, "25.5.2",
             " (unquoted, YAML turns 25.5 into a number and 7.10 into 7.1)"),
            ("ascend_preflight_firmware_version", firmware_version, "7.8.0.7.220", "")):
        if not isinstance(value, str) or not value:
            problems.append('%s is %s (%s): expected a quoted version string such as "%s"%s.' % (
                variable, json.dumps(value), yaml_type(value), example, why))
    for entry in disk_checks if isinstance(disk_checks, list) else [disk_checks]:
        fields = entry if isinstance(entry, dict) else {}
        path, size = fields.get("path"), fields.get("min_free_gb")
        if not (isinstance(path, str) and path.startswith("/") and isinstance(size, (int, float)) and size >= 0):
            problems.append("ascend_preflight_disk_checks entry %s: expected an absolute path and min_free_gb >= 0, "
                            "for example {path: /data/models, min_free_gb: 20, purpose: the model weights}." % (
                                json.dumps(entry, default=str),))
    return problems


def ascend_preflight_summary(hostvars, hosts, result_var="ascend_preflight_result"):
    """One line per host: passed, passed with warnings, failed (with reasons) or no result."""
    lines = []
    for host in hosts:
        result = hostvars.get(host, {}).get(result_var)
        if not result:
            lines.append("%s: NO RESULT (unreachable, or failed before the checks ran)" % host)
        elif result["failures"]:
            lines.append("%s: FAILED: %s" % (host, " | ".join(f["message"] for f in result["failures"])))
        elif result["warnings"]:
            lines.append("%s: PASSED with warnings (%s): %s" % (
                host, result.get("description"), " | ".join(w["message"] for w in result["warnings"])))
        else:
            lines.append("%s: PASSED (%s)" % (host, result.get("description")))
    return lines


class FilterModule:
    def filters(self):
        return {"ascend_preflight_findings": ascend_preflight_findings,
                "ascend_preflight_python": ascend_preflight_python,
                "ascend_preflight_setting_problems": ascend_preflight_setting_problems,
                "ascend_preflight_summary": ascend_preflight_summary}
