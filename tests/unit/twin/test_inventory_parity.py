"""The twin's inventory differs from a real site's (inventory/example) only where the twin must: how hosts are
reached, where images come from, how fast the stand-in runs, and the twin's hardware profile per host."""
import pathlib
import re

import yaml

from conftest import REPO
from twin.lifecycle import Twin, demo_hosts

EXAMPLE = REPO / "inventory" / "example"
TWIN = REPO / "inventory" / "twin"
CONNECTION = {"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
              "ansible_ssh_common_args"}
# Site settings the twin adds, each with why a real site has no need of its value.
TWIN_SETTINGS = {
    "fleet_image_registry_mirror": "the registry mirror: the twin's registry stands in for quay.io",
    "docker_runtime_daemon_options": "the registry mirror: it speaks plain HTTP",
    "vllm_server_extra_env": "speed: the stand-in's VLLM_TWIN_* knobs",
    "vllm_server_ready_timeout": "speed: the stand-in loads in seconds",
    "vllm_bench_poll_interval": "speed: twin benchmarks last seconds",
    "vllm_server_wait_poll_interval": "speed: the stand-in loads in seconds",
    "ascend_preflight_disk_checks": "size: the stand-in image and placeholder model are small",
    "monitoring_scrape_interval": "speed: the tests' faults fire in seconds",
    "monitoring_evaluation_interval": "speed: the tests' faults fire in seconds",
    "monitoring_scrape_timeout": "speed: within the twin's shorter scrape interval",
    "monitoring_fault_for": "speed: one of the twin's evaluation intervals",
    "host_exporters_npu_interval_s": "speed: a chip's fault reaches Prometheus in seconds",
}


def load(path):
    return yaml.safe_load(path.read_text()) or {}


def role_default(role, name):
    return load(REPO / "roles" / role / "defaults" / "main.yml")[name]


def test_every_example_setting_is_the_twins_too():
    example, twin = load(EXAMPLE / "group_vars/all.yml"), load(TWIN / "group_vars/all.yml")
    differing = {key: (value, twin.get(key)) for key, value in example.items() if twin.get(key) != value}
    assert differing == {}, "twin group_vars differ from inventory/example: %s" % differing
    assert set(twin) - set(example) <= set(TWIN_SETTINGS), sorted(set(twin) - set(example) - set(TWIN_SETTINGS))


def test_twin_settings_touch_no_path_or_name_a_real_site_uses():
    twin = load(TWIN / "group_vars/all.yml")
    mirror = twin["fleet_image_registry_mirror"]
    # The mirror, the same registry behind a login, and the site registry an image archive loads into
    # (tests/twin/lifecycle.py REGISTRY_LOGIN_PORT, SITE_REGISTRY_PORT).
    assert twin["docker_runtime_daemon_options"] == {"insecure-registries": [mirror, "twin-registry:5001",
                                                                             "twin-registry:5002"]}
    assert all(key.startswith("VLLM_TWIN_") for key in twin["vllm_server_extra_env"])
    # Disk checks: the same paths as the role's, only smaller sizes.
    default_paths = [check["path"] for check in role_default("ascend_preflight", "ascend_preflight_disk_checks")]
    assert [check["path"] for check in twin["ascend_preflight_disk_checks"]] == default_paths
    text = (TWIN / "group_vars/all.yml").read_text()
    assert "twin_root" not in text and "/var/lib/ascend-vllm-fleet-twin" not in text


def test_twin_hosts_carry_only_connection_variables_a_profile_and_an_operating_system(tmp_path):
    fleet = Twin(home=tmp_path / "home").fleet(tmp_path / "fleet", demo_hosts(3))
    document = fleet.inventory_document({name: "192.0.2.%d" % (10 + index)
                                         for index, name in enumerate(sorted(fleet.hosts))})
    ascend = document["all"]["children"]["ascend"]
    assert list(ascend["hosts"]) == ["twin-01", "twin-02", "twin-03"]
    assert [host["twin_profile"] for host in ascend["hosts"].values()] == ["seed_duo4", "duo2", "seed_duo4"]
    for variables in ascend["hosts"].values():
        assert set(variables) <= CONNECTION | {"twin_profile", "twin_os"} and variables["twin_os"] == "debian"
    assert set(ascend["vars"]) <= CONNECTION
    example = load(EXAMPLE / "hosts.yml")["all"]["children"]["ascend"]
    for variables in list(example["hosts"].values()) + [example["vars"]]:
        assert set(variables) <= CONNECTION
    # The gateway in front of them, in the group a real site puts its own in.
    gateway = document["all"]["children"]["gateway"]
    assert {name: host["twin_profile"] for name, host in gateway["hosts"].items()} == {"twin-gw": "gateway_monitoring"}
    assert set(gateway["vars"]) <= CONNECTION
    # The same machine watches the fleet, in the group a real site puts its monitoring hosts in.
    monitoring = document["all"]["children"]["monitoring"]
    assert monitoring["hosts"] == {"twin-gw": {}} and set(monitoring["vars"]) <= CONNECTION
    assert set(load(EXAMPLE / "hosts.yml")["all"]["children"]) == set(document["all"]["children"])


def test_roles_and_modules_know_nothing_of_the_twin():
    sources = [path for folder in ("roles", "library", "module_utils", "playbooks") for path in
               (REPO / folder).rglob("*") if path.is_file() and path.suffix in (".py", ".yml", ".j2", ".md")]
    sources.append(REPO / "site.yml")
    mentions = [str(path.relative_to(REPO)) for path in sources
                if re.search(r"\btwin", pathlib.Path(path).read_text(encoding="utf-8"), re.I)]
    assert mentions == []
