"""Who holds a chip, and whether it is this collection's, has one owner (module_utils/npu_holders.py's chip_holders):
the preflight, the driver role (its plan and its drain), the serving plan and the doctor come to the same verdict
on the same container. The names of the labels on this collection's containers are spelled in one place
(module_utils/container_labels.py)."""
import json
import re

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.ascend.fleet.plugins.filter import ascend_driver, ascend_preflight
from ansible_collections.ascend.fleet.plugins.module_utils import container_labels, serving_plan
from conftest import REPO

OWNER = REPO / "module_utils" / "container_labels.py"
# A label's name written out in code: in a string after a quote, a Jinja expression's end or a %s (".instance",
# "{{ prefix }}.instance", "%s.instance=%s"), or a string that ends with it ("prefix.instance").
LABEL_NAMES = "instance|host|port|served-name|config-hash"
SPELLED = re.compile(r"""(["'}]|%%s)\.(%s)\b|\.(%s)["']""" % (LABEL_NAMES, LABEL_NAMES))
# Where the collection's code is: what runs on the hosts, its plugins and its roles. The filters' documentation
# (plugins/filter/*.yml) shows labels as a container carries them, which is no spelling of the rule.
CODE = [path for folder in ("library", "module_utils", "plugins", "roles") for path in (REPO / folder).rglob("*")
        if path.suffix in (".py", ".yml", ".yaml", ".j2")
        and not (path.parent == REPO / "plugins" / "filter" and path.suffix == ".yml")]


@pytest.mark.parametrize("line", [
    'labels.get(label_prefix + ".instance")', '"label=%s.host=%s" % (label_prefix, host)',
    'label: "{{ fleet_label_prefix }}.instance"', "rejectattr('labels', 'contains', 'ascend-vllm-fleet.instance')",
    '["--label", "%s.config-hash=%s" % (prefix, spec_hash)]', '"%s.served-name=%s"', '"%s.port=%d"',
])
def test_the_guard_finds_a_label_spelled_out(line):
    assert SPELLED.search(line), line


def test_label_names_are_spelled_only_where_they_are_owned():
    assert CODE and OWNER in CODE
    found = ["%s:%d: %s" % (path.relative_to(REPO), number, line.strip())
             for path in CODE if path != OWNER
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if SPELLED.search(line)]
    assert found == [], "label names spelled outside module_utils/container_labels.py (use label_name):\n" + "\n".join(
        found)


def test_label_names_are_under_the_prefix():
    labels = container_labels
    assert [labels.label_name("site-b", label) for label in (
        labels.INSTANCE_LABEL, labels.HOST_LABEL, labels.PORT_LABEL, labels.SERVED_NAME_LABEL,
        labels.CONFIG_HASH_LABEL)] == [
        "site-b.instance", "site-b.host", "site-b.port", "site-b.served-name", "site-b.config-hash"]
    # An earlier deploy's instance carries both labels under its prefix; a lone .instance label is no deploy.
    assert labels.deploy_prefixes({"a.instance": "x", "a.host": "h", "b.instance": "y", "c.host": "h",
                                   "d.e.instance": "z", "d.e.host": "h"}) == ["a", "d.e"]


ID = "c" * 64
IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"


def the_preflight(labels, label_prefix):
    """Whether ascend_preflight_findings lets a container with these labels on /dev/davinci0 pass."""
    settings = {"architecture": "aarch64", "allowed_architectures": ["aarch64"], "driver_version": "25.5.2",
                "firmware_version": "7.8.0.7.220", "version_policy": "exact", "strict": True,
                "allowed_products": [], "unhealthy_chip_action": "fail", "label_prefix": label_prefix,
                "containers": [{"id": ID, "name": "vllm-ascend", "image": IMAGE, "devices": ["/dev/davinci0"],
                                "labels": labels, "status": "running"}]}
    result = ascend_preflight.ascend_preflight_findings({"devices": ["/dev/davinci0"]}, settings)
    return not [failure for failure in result["failures"] if failure["check"] == "chip held by a container"]


def the_driver_plan(labels, label_prefix):
    """Whether the driver's plan lets the container, and a process in it, pass."""
    holders = {"containers": [{"id": ID, "name": "vllm-ascend", "image": IMAGE, "devices": ["/dev/davinci0"],
                               "labels": labels}],
               "processes": [{"pid": 9, "name": "vllm", "devices": ["/dev/davinci0"], "container_id": ID}]}
    return ascend_driver.holder_problems(holders, label_prefix) == []


def the_driver_drain(labels, label_prefix):
    """Whether the driver's drain (tasks/drain.yml) stops the container as one of this collection's instances."""
    tasks = yaml.safe_load((REPO / "roles/ascend_driver/tasks/drain.yml").read_text())
    (task,) = [task for task in tasks if task["name"] == "Find this collection's running instances"]
    holders = {"containers": [{"id": ID, "name": "vllm-ascend", "devices": ["/dev/davinci0"], "labels": labels}],
               "processes": [], "docker_available": True}
    variables = {"ascend_driver_holders_before": holders, "fleet_label_prefix": label_prefix}
    found = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(task["ansible.builtin.set_fact"]["ascend_driver_instances"]))
    assert found in ([], ["vllm-ascend"]), found
    return found == ["vllm-ascend"]


def the_serving_plan(labels, label_prefix):
    """Whether the serving plan (and the doctor's evidence, which reads foreign_holders alike) lets it pass."""
    inspected = {"Id": ID, "Name": "/vllm-ascend", "State": {"Status": "running"},
                 "Config": {"Image": IMAGE, "Labels": labels},
                 "HostConfig": {"Privileged": False, "Devices": [{"PathOnHost": "/dev/davinci0"}]}}

    def docker(_docker, *args, **_kwargs):
        return (0, ID + "\n", "") if args[0] == "ps" else (0, json.dumps([inspected]), "")

    plan = {"host": "npu-a", "instances": [{"name": "vllm-ascend", "devices": ["/dev/davinci0"]}]}
    return serving_plan.refusals(plan, {}, "docker", label_prefix, docker) == []


JUDGES = (the_preflight, the_driver_plan, the_driver_drain, the_serving_plan)


@pytest.mark.parametrize("labels,label_prefix,ours", [
    ({"ascend-vllm-fleet.instance": "vllm-ascend", "ascend-vllm-fleet.host": "npu-a"}, "ascend-vllm-fleet", True),
    ({"site-b.instance": "vllm-ascend", "site-b.host": "npu-a"}, "site-b", True),
    # An earlier deploy under another prefix, another owner's container, and an instance label naming nothing.
    ({"site-b.instance": "vllm-ascend", "site-b.host": "npu-a"}, "ascend-vllm-fleet", False),
    ({"owner": "research"}, "ascend-vllm-fleet", False),
    ({}, "ascend-vllm-fleet", False),
    ({"ascend-vllm-fleet.instance": ""}, "ascend-vllm-fleet", False),
], ids=["ours", "ours under the operator's prefix", "another prefix", "another owner", "no labels",
        "empty instance label"])
def test_every_judge_of_a_chip_holder_comes_to_one_verdict(labels, label_prefix, ours):
    assert {judge.__name__: judge(labels, label_prefix) for judge in JUDGES} == {
        judge.__name__: ours for judge in JUDGES}


def test_the_driver_plan_judges_under_fleet_label_prefix():
    (plan_task,) = [task for task in yaml.safe_load((REPO / "roles/ascend_driver/tasks/plan.yml").read_text())
                    if task["name"] == "Plan the host"]
    assert plan_task["vars"]["ascend_driver_plan_settings"]["label_prefix"] == "{{ fleet_label_prefix }}"
