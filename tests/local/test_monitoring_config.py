"""The monitoring role on this machine: the scrape config it renders from the serving plans (checked by promtool, as
the role checks it), and its Grafana steps against a folder and against a small stand-in of Grafana's HTTP API.
The role on a twin monitoring host, with its alerts firing: tests/integration/test_gateway_fleet.py.

promtool must be in the virtualenv (scripts/dev installs it): without it these fail.
"""
import json
import sys

import pytest
import yaml
from fake_vllm import Scripted, serving
from monitoring_queries import dashboard_names, dashboard_text, load
from serving_plans import host, recorded

from conftest import REPO, run_playbook, venv_tool

TOKEN = "glsa_grafana-token-for-the-test"
RENDER = """
- name: Render Prometheus's config from the serving plans
  hosts: monitoring
  gather_facts: false
  tasks:
    - name: The plans, as the role reads them
      ansible.builtin.include_role:
        name: ascend.fleet.gateway
        tasks_from: plans.yml
        public: true
    - name: The role's settings
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop: [%(repo)s/roles/fleet/defaults/main.yml, %(repo)s/roles/monitoring/defaults/main.yml,
             %(repo)s/roles/monitoring/vars/main.yml]
    - name: Write the config as the role does
      ansible.builtin.template:
        src: %(repo)s/roles/monitoring/templates/prometheus.yml.j2
        dest: "{{ output }}"
        mode: "0644"
        validate: %(promtool)s check config --syntax-only %%s
""" % {"repo": REPO, "promtool": venv_tool("promtool")}
GRAFANA = """
- name: Provision the dashboards as the role does
  hosts: monitoring
  gather_facts: false
  tasks:
    - name: The role's Grafana steps
      ansible.builtin.include_role:
        name: ascend.fleet.monitoring
        tasks_from: grafana.yml
"""


def inventory(folder, **monitoring_vars):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "fleet_api_key": ""}
    plans = {}
    for name, layout in (("npu-a", "per_card"), ("npu-b", "single")):
        plans[name] = folder / (name + ".json")
        plans[name].write_text(json.dumps(recorded(host(npu_ids=(1, 2)), name, layout=layout)))
    document = {"all": {"vars": local, "children": {
        "gateway": {"hosts": {"gw": {"ansible_host": "10.0.9.2"}}},
        "monitoring": {"hosts": {"gw": dict(monitoring_vars, ansible_host="10.0.9.2")}},
        "ascend": {"hosts": {"npu-a": {"ansible_host": "10.0.9.11", "fleet_plan_file": str(plans["npu-a"])},
                             "npu-b": {"ansible_host": "10.0.9.12", "fleet_plan_file": str(plans["npu-b"])},
                             "npu-c": {"ansible_host": "10.0.9.13",
                                       "fleet_plan_file": str(folder / "npu-c-not-deployed.json")}}}}}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(document))
    return folder / "hosts.yml"


def test_the_scrape_config_names_every_instance_every_exporter_and_the_gateway(tmp_path):
    (tmp_path / "render.yml").write_text(RENDER)
    run = run_playbook(tmp_path / "run", inventory(tmp_path), str(tmp_path / "render.yml"),
                       "-e", "output=%s" % (tmp_path / "prometheus.yml"))
    assert run.rc == 0, run.stdout
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}

    def targets(job):
        return sorted((target, group["labels"]["host"], group["labels"].get("vllm_instance"))
                      for group in jobs[job]["static_configs"] for target in group["targets"])
    plan_a = json.loads((tmp_path / "npu-a.json").read_text())["instances"]
    plan_b = json.loads((tmp_path / "npu-b.json").read_text())["instances"]
    assert len(plan_a) == 2 and len(plan_b) == 1
    instances = [("10.0.9.11", "npu-a", i) for i in plan_a] + [("10.0.9.12", "npu-b", i) for i in plan_b]
    assert targets("vllm") == sorted(("%s:%d" % (address, i["port"]), name, i["name"])
                                     for address, name, i in instances)
    assert targets("vllm_health") == sorted(("http://%s:%d/health" % (address, i["port"]), name, i["name"])
                                            for address, name, i in instances)
    assert jobs["vllm_health"]["params"] == {"module": ["http_2xx"]}
    # Every serving host's exporters, the gateway's node exporter, and HAProxy's exporter at 127.0.0.1 on the
    # gateway that is this monitoring host; npu-c has no plan yet, but its exporters are scraped.
    assert targets("node") == [("10.0.9.11:9100", "npu-a", None), ("10.0.9.12:9100", "npu-b", None),
                               ("10.0.9.13:9100", "npu-c", None), ("10.0.9.2:9100", "gw", None)]
    assert targets("npu") == [("10.0.9.11:8082", "npu-a", None), ("10.0.9.12:8082", "npu-b", None),
                              ("10.0.9.13:8082", "npu-c", None)]
    assert targets("gateway") == [("127.0.0.1:8405", "gw", None)]
    assert config["rule_files"] == ["/etc/prometheus/ascend-fleet-rules.yml"]
    assert config["global"]["scrape_interval"] == "15s"


class Grafana(Scripted):
    """Grafana's dashboard API as the role uses it: read one by uid, save one (overwrite). Scripted's JSON answer
    and quiet log, none of its vLLM routes."""

    stored, posted, tokens = {}, [], set()

    def answer_json(self, status, body):
        self.answer(status, json.dumps(body).encode())

    def do_GET(self):
        self.tokens.add(self.headers.get("Authorization"))
        uid = self.path.rsplit("/", 1)[-1]
        if self.path.startswith("/api/dashboards/uid/") and uid in self.stored:
            self.answer_json(200, {"dashboard": self.stored[uid], "meta": {}})
        else:
            self.answer_json(404, {"message": "Dashboard not found"})

    def do_POST(self):
        self.tokens.add(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        dashboard = dict(body["dashboard"], version=len(self.posted) + 1, id=len(self.posted) + 1)
        self.stored[dashboard["uid"]] = dashboard
        self.posted.append(dashboard["uid"])
        self.answer_json(200, {"status": "success", "uid": dashboard["uid"]})


@pytest.fixture
def grafana():
    Grafana.stored, Grafana.posted, Grafana.tokens = {}, [], set()
    with serving(Grafana) as url:
        yield url + "/"  # a trailing slash, as users write URLs: the role's API paths take it off


def test_dashboards_are_posted_to_grafana_once_and_again_only_when_they_differ(tmp_path, grafana):
    (tmp_path / "grafana.yml").write_text(GRAFANA)
    hosts = inventory(tmp_path, monitoring_grafana_url=grafana, monitoring_grafana_token=TOKEN)
    uids = sorted(load(name)["uid"] for name in dashboard_names())
    first = run_playbook(tmp_path / "first", hosts, str(tmp_path / "grafana.yml"))
    assert first.rc == 0, first.stdout
    assert sorted(Grafana.posted) == uids and first.changed() == 1
    assert Grafana.tokens == {"Bearer " + TOKEN} and TOKEN not in first.stdout
    assert TOKEN not in json.dumps(first.events)
    for stored in Grafana.stored.values():
        assert [tag for tag in stored["tags"] if tag.startswith("ascend-fleet-")], stored["tags"]
    second = run_playbook(tmp_path / "second", hosts, str(tmp_path / "grafana.yml"))
    assert second.rc == 0 and second.changed() == 0, second.stdout
    assert sorted(Grafana.posted) == uids
    # One dashboard changed in Grafana by hand (another version): only that one is posted again.
    Grafana.stored[uids[0]]["tags"] = ["edited"]
    third = run_playbook(tmp_path / "third", hosts, str(tmp_path / "grafana.yml"))
    assert third.rc == 0 and Grafana.posted[len(uids):] == [uids[0]], third.stdout


def test_dashboards_and_a_data_source_go_into_a_provisioning_folder(tmp_path):
    (tmp_path / "grafana.yml").write_text(GRAFANA)
    folder = tmp_path / "provisioning"
    hosts = inventory(tmp_path, monitoring_grafana_provisioning_dir=str(folder))
    first = run_playbook(tmp_path / "first", hosts, str(tmp_path / "grafana.yml"))
    assert first.rc == 0, first.stdout
    # As the role renders them: the gateway's backend written in, Grafana's own {{label}} legends left as they are.
    for name in dashboard_names():
        assert (folder / "dashboards/ascend-fleet" / name).read_text() == dashboard_text(name)
    provider = yaml.safe_load((folder / "dashboards/ascend-fleet.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == str(folder / "dashboards/ascend-fleet")
    source = yaml.safe_load((folder / "datasources/ascend-fleet.yaml").read_text())["datasources"][0]
    assert source["type"] == "prometheus" and source["url"] == "http://10.0.9.2:9090"
    second = run_playbook(tmp_path / "second", hosts, str(tmp_path / "grafana.yml"))
    assert second.rc == 0 and second.changed() == 0, second.stdout
