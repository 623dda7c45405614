"""The gateway role on this machine: the HAProxy config it renders from the serving plans (checked by haproxy
itself), library/haproxy_server.py against a real HAProxy run from that config, in front of a tiny local server
with /health, and the role's drain and restore steps. Its filters: tests/unit/roles/gateway/.

HAProxy must be installed on the machine running the tests (scripts/dev installs it): without it these fail.
"""
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml
from fake_vllm import serving
from module_runs import run_module
from serving_plans import host, recorded

from ansible_collections.ascend.fleet.plugins.modules import haproxy_server
from conftest import GATEWAY_BACKEND as BACKEND
from conftest import REPO, free_port, run_playbook

HAPROXY = shutil.which("haproxy")


class Instance(http.server.BaseHTTPRequestHandler):
    """A vLLM instance as the gateway sees it: /health, an answer held until `release` is set, a stream whose
    first event comes at once and the rest after `release`, and the Authorization header it was sent."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()
    seen = []  # every request but the health checks, as (method, path)

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except ConnectionResetError:
            pass  # HAProxy ends its health checks' connections with a reset

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        # As vLLM 0.18 answers them, with no key asked: a chat completion (SageMaker's route) and token ids.
        self.seen.append(("POST", self.path))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path in ("/invocations", "/tokenize"):
            self.answer(b'{"choices": [{"message": {"content": "an answer without the key"}}]}')
        else:
            self.send_error(404)

    def do_GET(self):
        if self.path != "/health":
            self.seen.append(("GET", self.path))
        if self.path == "/health":
            self.answer(b"")
        elif self.path == "/v1/held":
            self.release.wait(30)
            self.answer(b"{}")
        elif self.path == "/v1/authorization":
            self.answer(json.dumps(self.headers.get("Authorization")).encode())
        elif self.path == "/v1/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"data: first\n\n")
            self.wfile.flush()
            self.release.wait(30)
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True
        else:
            self.send_error(404)


PLAYBOOK = """
- name: Render the gateway's config from the serving plans
  hosts: gateway
  gather_facts: false
  tasks:
    - name: Take the servers from the plans with the role's own tasks
      ansible.builtin.include_role:
        name: ascend.fleet.gateway
        tasks_from: plans.yml
        public: true
    - name: Write the config as the role does
      ansible.builtin.template:
        src: %s
        dest: "{{ gateway_config_file }}"
        mode: "0644"
        validate: haproxy -c -f %%s
""" % (REPO / "roles/gateway/templates/haproxy.cfg.j2")


def require_haproxy():
    assert HAPROXY, "haproxy is not installed: the gateway's config and module are tested against it. Fix: " \
                    "scripts/dev installs it (apt-get install haproxy)"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The config the role renders for npu-a (one instance, serving), npu-b (one instance on a closed port) and
    npu-c (not deployed), with its runs' results: (config text, settings, first run, second run)."""
    require_haproxy()
    folder = tmp_path_factory.mktemp("gateway")
    with serving(Instance) as url:
        settings = {"socket": str(folder / "admin.sock"), "port": free_port(), "prometheus_port": free_port(),
                    "instance_port": int(url.rsplit(":", 1)[1]), "folder": folder}
        for name, port in (("npu-a", settings["instance_port"]), ("npu-b", free_port())):
            (folder / (name + ".json")).write_text(json.dumps(recorded(host(), name, port=port)))
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        inventory = {"all": {"vars": local, "children": {
            "gateway": {"hosts": {"gw": {}}},
            "ascend": {"hosts": {name: {"ansible_host": "127.0.0.1", "fleet_plan_file": str(folder / (name + ".json"))}
                                 for name in ("npu-a", "npu-b", "npu-c")}}}}}
        (folder / "hosts.yml").write_text(yaml.safe_dump(inventory))
        (folder / "gateway.yml").write_text(PLAYBOOK)
        (folder / "vars.json").write_text(json.dumps({
            "fleet_api_key": "", "gateway_admin_socket": settings["socket"], "gateway_port": settings["port"],
            "gateway_bind_address": "127.0.0.1", "gateway_prometheus_port": settings["prometheus_port"],
            "gateway_check_interval_s": 1, "gateway_config_file": str(folder / "haproxy.cfg")}))
        runs = [run_playbook(folder / ("run%d" % number), folder / "hosts.yml", str(folder / "gateway.yml"),
                             "-e", "@%s" % (folder / "vars.json")) for number in (1, 2)]
        yield (folder / "haproxy.cfg").read_text(), settings, runs[0], runs[1]


def test_the_config_names_every_instance_of_the_plans_and_haproxy_accepts_it(rendered):
    config, settings, first, _second = rendered
    assert first.rc == 0, first.stdout
    checked = subprocess.run([HAPROXY, "-c", "-f", str(settings["folder"] / "haproxy.cfg")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert checked.returncode == 0, checked.stdout
    lines = [line.strip() for line in config.splitlines()]
    servers = [line for line in lines if line.startswith("server ")]
    assert servers[0] == "server npu-a:vllm-ascend 127.0.0.1:%d" % settings["instance_port"]
    assert servers[1].startswith("server npu-b:vllm-ascend 127.0.0.1:")
    assert len(servers) == 2  # npu-c has no plan yet
    for expected in ["stats socket %s mode 660 level admin" % settings["socket"],
                     "bind 127.0.0.1:%d" % settings["port"], "balance leastconn", "option httpchk GET /health",
                     "http-check expect status 200", "retry-on conn-failure", "retries 3", "option redispatch",
                     "default-server check inter 1s fall 3 rise 2", "timeout client 600s", "timeout server 600s",
                     "bind 127.0.0.1:%d" % settings["prometheus_port"],
                     "http-request use-service prometheus-exporter if { path /metrics }"]:
        assert expected in lines, expected
    # Nothing that buffers or compresses an answer, or touches the request's headers.
    for unwanted in ("compression", "http-buffer-request", "http-request del-header", "http-request set-header",
                     "http-response", "retry-on all", "retry-on response"):
        assert unwanted not in config


def test_a_host_not_deployed_yet_is_named_and_a_second_run_changes_nothing(rendered):
    _config, _settings, first, second = rendered
    said = first.results("Name the serving hosts not deployed yet")["gw"]["msg"]
    assert said.startswith("npu-c: no serving plan recorded yet")
    assert first.changed() == 1  # the config
    assert second.rc == 0 and second.changed() == 0, second.stdout


@pytest.fixture(scope="module")
def haproxy(rendered):
    """HAProxy run from the rendered config until the module's tests end; its settings."""
    config, settings, _first, _second = rendered
    process = subprocess.Popen([HAPROXY, "-db", "-f", str(settings["folder"] / "haproxy.cfg")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        api = haproxy_server.RuntimeApi(settings["socket"])
        deadline = time.time() + 20
        while not (os.path.exists(settings["socket"]) and status_of(api, "npu-a:vllm-ascend") == "UP"):
            assert process.poll() is None and time.time() < deadline, process.stdout.read1().decode() \
                if process.poll() is not None else "npu-a not UP within 20 s"
            time.sleep(0.2)
        yield dict(settings, api=api)
    finally:
        process.terminate()
        process.wait(10)


def status_of(api, server):
    return next(row["status"] for row in api.stat_rows() if row["pxname"] == BACKEND and row["svname"] == server)


@pytest.fixture
def gateway_on(haproxy):
    """The running HAProxy, npu-a put back to ready after each test, with no request held."""
    Instance.release.clear()
    yield haproxy
    Instance.release.set()
    haproxy["api"].command("set server %s/npu-a:vllm-ascend state ready" % BACKEND)
    deadline = time.time() + 10
    while status_of(haproxy["api"], "npu-a:vllm-ascend") != "UP" and time.time() < deadline:
        time.sleep(0.2)


def server_state(haproxy, server="npu-a:vllm-ascend", **args):
    return run_module("haproxy_server", socket=haproxy["socket"], backend=BACKEND, server=server, **args)


def get(port, path, headers=None, timeout=10, method="GET", body=None):
    """(connection, response) of one request to a port on this machine; GET unless told otherwise."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request(method, path, body=body, headers=headers or {})
    return connection, connection.getresponse()


def hold_a_request(haproxy):
    """A request held by npu-a through the gateway, in a thread; returns once HAProxy counts its session."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(get(haproxy["port"], "/v1/held", timeout=40)[1].status),
                              daemon=True)
    thread.start()
    deadline = time.time() + 10
    while server_state(haproxy, state="ready", _ansible_check_mode=True)["current"]["sessions"] != 1:
        assert time.time() < deadline, "the held request never reached npu-a"
        time.sleep(0.1)
    return thread, answers


def test_health_needs_no_key_and_the_authorization_header_reaches_the_instance_untouched(gateway_on):
    assert get(gateway_on["port"], "/health")[1].status == 200
    key = "Bearer sk-fleet-key-0123"
    assert json.loads(get(gateway_on["port"], "/v1/authorization", {"Authorization": key})[1].read()) == key


# (method, path, what the instance itself answers): vLLM 0.18 answers the first two without the key, and a
# server that merges leading slashes (as this one does) the third.
OUTSIDE_THE_API = [("POST", "/invocations", 200), ("POST", "/tokenize", 200), ("POST", "//invocations", 200),
                   ("GET", "/metrics", 404), ("GET", "/V1/models", 404)]


@pytest.mark.parametrize("method, path, direct_status", OUTSIDE_THE_API)
def test_paths_outside_the_openai_api_are_refused_before_any_instance(gateway_on, method, path, direct_status):
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}]})
    assert get(gateway_on["instance_port"], path, method=method, body=body)[1].status == direct_status
    seen = len(Instance.seen)
    assert get(gateway_on["port"], path, method=method, body=body)[1].status == 403
    assert Instance.seen[seen:] == [], "the gateway passed %s %s on" % (method, path)


def test_a_stream_is_passed_through_as_it_comes(gateway_on):
    connection, response = get(gateway_on["port"], "/v1/stream", timeout=5)
    # The instance holds the rest of the stream: the first event arrives only if nothing buffers the answer.
    assert response.status == 200 and response.fp.readline() == b"data: first\n"
    Instance.release.set()
    assert response.read().endswith(b"data: [DONE]\n\n")
    connection.close()


def test_haproxys_prometheus_exporter_answers_on_its_local_port(gateway_on):
    _connection, response = get(gateway_on["prometheus_port"], "/metrics")
    metrics = response.read().decode()
    assert response.status == 200
    assert 'haproxy_server_status{proxy="%s",server="npu-a:vllm-ascend",state="UP"} 1' % BACKEND in metrics


def test_a_server_already_ready_is_not_changed(gateway_on):
    result = server_state(gateway_on, state="ready", wait_up=True, timeout=5)
    assert result["changed"] is False and result["found"] is True
    assert result["previous"]["admin"] == result["current"]["admin"] == "ready"
    assert result["current"]["status"] == "UP"


def test_check_mode_reports_the_drain_without_draining(gateway_on):
    result = server_state(gateway_on, state="drain", wait_idle=True, _ansible_check_mode=True)
    assert result["changed"] is True and result["current"]["admin"] == "ready"
    assert status_of(gateway_on["api"], "npu-a:vllm-ascend") == "UP"
    assert get(gateway_on["port"], "/health")[1].status == 200


def test_drain_waits_until_the_open_request_ends_and_sends_no_new_one(gateway_on):
    thread, answers = hold_a_request(gateway_on)
    threading.Timer(1.5, Instance.release.set).start()
    result = server_state(gateway_on, state="drain", wait_idle=True, timeout=20)
    thread.join(5)
    assert answers == [200]  # the request in flight was answered
    assert result["changed"] is True and result["previous"]["sessions"] == 1
    assert result["current"] == dict(result["current"], admin="drain", status="DRAIN", sessions=0)
    assert 1.0 <= result["waited_s"] < 20
    # npu-b is down and npu-a drained: a new request finds no server.
    assert get(gateway_on["port"], "/health")[1].status == 503
    again = server_state(gateway_on, state="drain", wait_idle=True, timeout=5)
    assert again["changed"] is False and again["previous"]["admin"] == "drain"


def test_drain_fails_naming_the_session_still_open_after_the_timeout(gateway_on):
    thread, _answers = hold_a_request(gateway_on)
    result = server_state(gateway_on, state="drain", wait_idle=True, timeout=1)
    assert result["failed"] is True
    assert "%s/npu-a:vllm-ascend still holds 1 session(s) after 1 s: from 127.0.0.1:" % BACKEND in result["msg"]
    assert "gateway_drain_timeout_s" in result["msg"]
    Instance.release.set()
    thread.join(5)


def test_ready_puts_a_server_in_maintenance_back_once_it_is_up(gateway_on):
    assert server_state(gateway_on, state="maint")["current"]["admin"] == "maint"
    assert status_of(gateway_on["api"], "npu-a:vllm-ascend") == "MAINT"
    result = server_state(gateway_on, state="ready", wait_up=True, timeout=20)
    assert result["changed"] is True and result["previous"]["admin"] == "maint"
    assert result["current"]["admin"] == "ready" and result["current"]["status"] == "UP"
    assert get(gateway_on["port"], "/health")[1].status == 200


def test_waiting_for_a_server_that_never_comes_up_fails_with_its_last_check(gateway_on):
    result = server_state(gateway_on, server="npu-b:vllm-ascend", state="ready", wait_up=True, timeout=1)
    assert result["failed"] is True
    assert "%s/npu-b:vllm-ascend is DOWN after 1 s, not UP (last health check: " % BACKEND in result["msg"]
    assert "Layer4 connection problem: Connection refused" in result["msg"]


def test_unknown_names_are_listed_or_skipped_when_asked(gateway_on):
    backend = run_module("haproxy_server", socket=gateway_on["socket"], backend="vllm", server="x", state="drain")
    assert backend["failed"] is True
    assert "backend 'vllm' is not in HAProxy's config (its backends: %s)" % BACKEND in backend["msg"]
    server = server_state(gateway_on, server="npu-c:vllm-ascend", state="drain")
    assert server["failed"] is True
    assert ("server 'npu-c:vllm-ascend' is not in backend '%s' (its servers: npu-a:vllm-ascend, npu-b:vllm-ascend)"
            % BACKEND) in server["msg"]
    skipped = server_state(gateway_on, server="npu-c:vllm-ascend", state="drain", wait_idle=True, skip_unknown=True)
    assert skipped["changed"] is False and skipped["found"] is False and "failed" not in skipped
    assert skipped["msg"] == "skipped: backend '%s' has no server 'npu-c:vllm-ascend'" % BACKEND


REPLACEMENT_STEP = """
- name: Run a step of the rolling replacement for npu-a's instances
  hosts: npu-a
  gather_facts: false
  tasks:
    - name: Include the step as vllm_server does
      ansible.builtin.include_role:
        name: ascend.fleet.gateway
        tasks_from: "{{ step }}"
      vars:
        gateway_instances: [vllm-ascend, vllm-ascend-npu9]
"""


def replacement_step(gateway_on, step, inventory="hosts.yml"):
    folder = gateway_on["folder"]
    (folder / "step.yml").write_text(REPLACEMENT_STEP)
    return run_playbook(folder / ("%s-%s" % (step, time.time())), folder / inventory, str(folder / "step.yml"),
                        "-e", "@%s" % (folder / "vars.json"), "-e", "step=%s" % step)


def test_drain_and_restore_act_on_the_instances_the_gateway_serves_and_skip_the_others(gateway_on):
    drained = replacement_step(gateway_on, "drain.yml")
    assert drained.rc == 0, drained.stdout
    assert status_of(gateway_on["api"], "npu-a:vllm-ascend") == "DRAIN"
    assert status_of(gateway_on["api"], "npu-b:vllm-ascend") != "DRAIN"  # another host's instance of that name
    waited = drained.results("Wait until the instances' requests in flight have ended")["npu-a"]["results"]
    assert [(r["item"], r["found"]) for r in waited] == [(["gw", "vllm-ascend"], True),
                                                         (["gw", "vllm-ascend-npu9"], False)]
    restored = replacement_step(gateway_on, "restore.yml")
    assert restored.rc == 0, restored.stdout
    assert status_of(gateway_on["api"], "npu-a:vllm-ascend") == "UP"
    assert drained.changed() == 1 and restored.changed() == 1


def test_drain_does_nothing_without_gateways(gateway_on):
    inventory = yaml.safe_load((gateway_on["folder"] / "hosts.yml").read_text())
    del inventory["all"]["children"]["gateway"]
    (gateway_on["folder"] / "no-gateway.yml").write_text(yaml.safe_dump(inventory))
    drained = replacement_step(gateway_on, "drain.yml", "no-gateway.yml")
    assert drained.rc == 0 and drained.changed() == 0, drained.stdout
    assert status_of(gateway_on["api"], "npu-a:vllm-ascend") == "UP"


def test_the_exporter_is_left_out_when_its_port_is_0(rendered):
    _config, settings, _first, _second = rendered
    folder = settings["folder"]
    exporterless = json.loads((folder / "vars.json").read_text())
    exporterless.update(gateway_prometheus_port=0, gateway_config_file=str(folder / "no-exporter.cfg"))
    (folder / "no-exporter.json").write_text(json.dumps(exporterless))
    run = run_playbook(folder / "run-no-exporter", folder / "hosts.yml", str(folder / "gateway.yml"),
                       "-e", "@%s" % (folder / "no-exporter.json"))
    assert run.rc == 0, run.stdout
    config = (folder / "no-exporter.cfg").read_text()
    assert "prometheus" not in config and "server npu-a:vllm-ascend 127.0.0.1:" in config


def test_an_instance_the_gateway_lacks_is_added_with_the_gateways_checks_and_put_in_rotation(gateway_on):
    """A layout change starts instances the config does not name yet: they serve through the gateway before the
    next gateway run writes them in."""
    api, name = gateway_on["api"], "npu-a:vllm-ascend-npu1-chip0"
    where = {"address": "127.0.0.1", "port": gateway_on["instance_port"],
             "options": ["check", "inter", "1s", "fall", "3", "rise", "2"]}
    would = server_state(gateway_on, server=name, state="ready", add_at=where, _ansible_check_mode=True)
    assert (would["changed"], would["added"], would["found"]) == (True, True, False)
    try:
        added = server_state(gateway_on, server=name, state="ready", wait_up=True, timeout=20, add_at=where)
        assert (added["changed"], added["added"]) == (True, True), added
        assert added["current"]["status"] == "UP" and added["current"]["admin"] == "ready"
        assert status_of(api, name) == "UP"
        assert get(gateway_on["port"], "/health")[1].status == 200
        again = server_state(gateway_on, server=name, state="ready", wait_up=True, timeout=20, add_at=where)
        assert (again["changed"], again["added"]) == (False, False), "a second call changes nothing"
        bad = server_state(gateway_on, server="npu-a:x", state="ready", add_at=dict(where, address="1.2.3.4\nshow"))
        assert bad["failed"] and "add_at" in bad["msg"] and "'1.2.3.4\\nshow'" in bad["msg"]
    finally:
        api.command("set server %s/%s state maint" % (BACKEND, name))
        api.command("del server %s/%s" % (BACKEND, name))
