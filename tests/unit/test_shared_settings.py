"""Settings shared by several phases have one home, the fleet role, and no role repeats one as a fallback."""
import json
import re

import pytest
import yaml

from conftest import GATEWAY_BACKEND, REPO

ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/defaults/main.yml"))
PHASE_ROLES = [role for role in ROLES if role != "fleet"]
# `name | default(<literal>)`: the literal is a second copy of some default. (`default(omit, true)` and
# `default(other_variable, true)` pick between settings and repeat no value.)
FALLBACK = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(\s*(?:['\"\d\[{]|true\b|false\b|none\b)")


def defaults(role):
    return yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {}


def role_files(role):
    folder = REPO / "roles" / role
    return sorted(path for path in folder.rglob("*") if path.suffix in (".yml", ".j2", ".py"))


@pytest.mark.parametrize("role", PHASE_ROLES)
def test_every_role_loads_the_shared_settings_first(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta/main.yml").read_text())
    assert {"role": "ascend.fleet.fleet"} in meta["dependencies"], (
        "roles/%s/meta/main.yml: add `- role: ascend.fleet.fleet`" % role)


@pytest.mark.parametrize("role", PHASE_ROLES)
def test_no_role_declares_a_shared_setting(role):
    options = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
    declared = [name for name in list(defaults(role)) + list(options["argument_specs"]["main"]["options"])
                if not name.startswith(role + "_")]
    assert declared == [], "roles/%s declares %s: variables belong to the role they are prefixed with" % (
        role, ", ".join(declared))


@pytest.mark.parametrize("role", ROLES)
def test_no_fallback_for_a_variable_some_role_defines(role):
    defined = set()
    for other in ROLES:
        defined |= set(defaults(other))
    found = []
    for path in role_files(role):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += ["%s:%d %s" % (path.relative_to(REPO), number, name)
                      for name in FALLBACK.findall(line) if name in defined]
    assert found == [], "fallbacks that repeat a role default: %s" % "; ".join(found)


PLAYBOOKS = sorted(path.name for path in (REPO / "playbooks").glob("*.yml") if path.name != "python.yml")


def test_the_shared_settings_are_checked_once_per_run_not_by_each_role_that_loads_them():
    """Each role's dependency on the fleet role runs its tasks/main.yml: with no entry point `main` in the spec,
    Ansible inserts no argument check there. The one entry point is tasks/settings.yml's, which python.yml runs."""
    specs = yaml.safe_load((REPO / "roles/fleet/meta/argument_specs.yml").read_text())["argument_specs"]
    assert list(specs) == ["settings"]
    play = yaml.safe_load((REPO / "playbooks/python.yml").read_text())[0]
    # Ansible picks the entry point by tasks_from as written: "settings.yml" would check nothing.
    assert {"name": "ascend.fleet.fleet", "tasks_from": "settings"} in [
        task.get("ansible.builtin.import_role") for task in play["tasks"]]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_playbook_checks_python_and_the_shared_settings_first(playbook):
    """Before any role of the playbook reads a host or a setting. Three check the settings in their own play instead:
    benchmark.yml (site.yml imports it with no hosts unless the benchmark is asked for), and the read-only
    diagnoses, which report a host whose Python hangs or is too old rather than refuse it."""
    first = yaml.safe_load((REPO / "playbooks" / playbook).read_text())[0]
    if playbook in ("benchmark.yml", "doctor.yml", "verify.yml"):
        assert {"name": "ascend.fleet.fleet", "tasks_from": "settings"} == (
            first["pre_tasks"][0]["ansible.builtin.import_role"])
    else:
        assert first.get("ansible.builtin.import_playbook") == "python.yml", (
            "playbooks/%s: start with `ansible.builtin.import_playbook: python.yml`" % playbook)


PHASES = sorted(path.name for path in (REPO / "playbooks/phases").glob("*.yml"))


def imports(playbook):
    return [entry.get("ansible.builtin.import_playbook") for entry in yaml.safe_load(
        (REPO / "playbooks" / playbook).read_text())]


def test_a_whole_run_checks_python_once_and_each_phase_playbook_before_its_phase():
    """site.yml imports the Python play once, then each phase's plays (playbooks/phases/); a phase's playbook is the
    Python play and that phase: a phase run alone is checked as a whole run is, and a whole run parses and shows
    the Python play once, not once per phase."""
    assert PHASES == ["deploy.yml", "driver.yml", "gateway.yml", "monitoring.yml", "preflight.yml"]
    site = imports("site.yml")
    assert site.count("python.yml") == 1 and site[0] == "python.yml", site
    assert [name for name in site if name.startswith("phases/")] == [
        "phases/%s.yml" % phase for phase in ("driver", "preflight", "deploy", "gateway", "monitoring")]
    for phase in PHASES:
        assert imports(phase) == ["python.yml", "phases/%s" % phase], phase
        assert set(imports("phases/%s" % phase)) == {None}, "playbooks/phases/%s imports a playbook" % phase


@pytest.mark.parametrize("playbook", ["phases/deploy.yml", "phases/driver.yml"])
def test_play_keywords_repeat_the_fleet_defaults_exactly(playbook):
    """serial and max_fail_percentage are read before any role loads, so a batched play carries the defaults too."""
    (play,) = [play for play in yaml.safe_load((REPO / "playbooks" / playbook).read_text()) if "serial" in play]
    fleet = defaults("fleet")
    assert play["serial"] == "{{ fleet_serial | default('%s') }}" % fleet["fleet_serial"]
    assert play["max_fail_percentage"] == "{{ fleet_max_fail_percentage | default(%d) }}" % (
        fleet["fleet_max_fail_percentage"])


def test_the_benchmark_plays_target_is_the_roles_default():
    """The play's hosts are read before the role loads: benchmark.yml repeats vllm_bench_target's default."""
    (play,) = yaml.safe_load((REPO / "playbooks/benchmark.yml").read_text())
    target = defaults("vllm_bench")["vllm_bench_target"]
    assert "(vllm_bench_target | default('%s')) == 'gateway'" % target in play["hosts"]


def test_the_gateway_rows_the_report_finds_are_the_ones_the_benchmark_records():
    from ansible_collections.ascend.fleet.plugins.plugin_utils import report

    role_vars = yaml.safe_load((REPO / "roles/vllm_bench/vars/main.yml").read_text())
    assert role_vars["vllm_bench_gateway_instance"] == report.GATEWAY_INSTANCE


def blocks(tasks):
    for task in tasks or []:
        if "block" in task:
            yield task
            yield from blocks(task["block"])


@pytest.mark.parametrize("playbook", ["phases/deploy.yml", "phases/driver.yml", "teardown.yml", "host_tuning.yml"])
def test_a_host_that_fails_is_one_max_fail_percentage_counts(playbook):
    """Each play that holds the hosts' lock lets it go in a rescue that fails the host again, and after the block
    on success. An `always:` section would leave a failed host a task to run, which max_fail_percentage does not
    count: a rollout would go on to its next batch whatever failed in this one."""
    for play in yaml.safe_load((REPO / "playbooks" / playbook).read_text()):
        locked = [block for block in blocks(play.get("tasks")) if "lock.yml" in json.dumps(block["block"][:1])]
        if not locked:
            continue
        (block,) = locked
        assert "always" not in block and "unlock_after_failure.yml" in json.dumps(block["rescue"]), playbook
        assert "unlock.yml" in json.dumps(play["tasks"][play["tasks"].index(block) + 1]), playbook
        break
    else:
        pytest.fail("%s: no play takes the hosts' lock" % playbook)


def test_every_report_goes_under_the_one_reports_folder_the_fleet_role_owns():
    """fleet_reports_dir is the reports root: the benchmark's and the doctor's defaults name it, and no role makes
    a reports path of its own (from playbook_dir, which is inside an installed collection, or the current folder)."""
    fleet = yaml.safe_load((REPO / "roles/fleet/defaults/main.yml").read_text())
    assert fleet["fleet_reports_dir"] == "{{ 'reports' | realpath }}"
    bench = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text())
    assert bench["vllm_bench_reports_dir"] == "{{ fleet_reports_dir }}"
    doctor = (REPO / "roles/doctor/tasks/main.yml").read_text()
    assert "doctor_report_dir or (fleet_reports_dir ~ '/doctor-'" in doctor
    others = [str(path.relative_to(REPO)) for path in sorted((REPO / "roles").rglob("*.yml"))
              if "reports" in path.read_text() and ("playbook_dir" in path.read_text()
                                                    or "'reports' | realpath" in path.read_text())
              and path != REPO / "roles/fleet/defaults/main.yml"]
    assert others == []


def test_the_gateways_backend_is_named_by_the_fleet_role_alone():
    """HAProxy's backend of every instance: the gateway's config defines it, its drain and restore steps address it,
    and the monitoring role's alert rule and fleet dashboard select its servers by it. Each takes
    fleet_gateway_backend; no other file of the collection spells the name, so none can drift from the config."""
    owner = REPO / "roles/fleet/vars/main.yml"
    spelled = [str(path.relative_to(REPO)) for folder in ("roles", "playbooks", "templates", "plugins", "module_utils")
               for path in sorted((REPO / folder).rglob("*"))
               if path.is_file() and path != owner and GATEWAY_BACKEND in path.read_text(errors="replace")]
    assert spelled == []
    users = ["roles/gateway/templates/haproxy.cfg.j2", "roles/gateway/tasks/drain.yml",
             "roles/gateway/tasks/restore.yml", "roles/monitoring/templates/alert_rules.yml.j2",
             "roles/monitoring/templates/dashboards/ascend-fleet.json.j2"]
    assert [user for user in users if "fleet_gateway_backend" not in (REPO / user).read_text()] == []
