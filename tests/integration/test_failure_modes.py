"""What real 310P hosts and real vLLM do, as the twin now does it, and what the roles make of it: chips held by one
container, privileged containers that see every chip, /dev/davinciN numbered by physical id, a key the server
refuses, jemalloc preloaded only by an interactive shell, large images that crash the engine, and instances that
load together."""
import json
import re
import tarfile
import time

import pytest
import requests
from readme_commands import recap

from ansible_collections.ascend.fleet.plugins.module_utils import png_images
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import ImageChat, image_data_url
from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import DEFAULT_PORT as PORT
from twin_fleet import SMALL_BENCH_PLAY, DeployedFleet, serves_now, wait_until

pytestmark = pytest.mark.docker
DUAL, REMAPPED = "npu-dual", "npu-remap"
MODEL = "Qwen3-VL-8B-Instruct"
PER_CARD = {"vllm_server_layout": "per_card"}
# What each test changes reaches the server phase alone: its runs skip the phases before it (the whole of site.yml
# runs in the module's deploy).
SERVER = ("--tags", "server")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    hosts = {DUAL: "duo2_one_node", REMAPPED: "remapped_duo2"}
    with DeployedFleet.made(tmp_path_factory.mktemp("modes"), hosts) as fleet:
        yield fleet


@pytest.fixture
def fleet(deployed):
    """The module's fleet, which each test leaves as its deploy did (DeployedFleet.restore)."""
    with deployed.guarded():
        yield deployed


def opened_chips(host, container):
    """The /dev/davinciN the server opened, from its own log line."""
    logs = host.docker("logs", container).stdout
    found = re.findall(r"NPU chips opened: ([\w ]+) \(logical", logs)
    assert found, logs
    return found[-1].split()


def chat(host, port, key, width, height):
    body = ImageChat(MODEL, "describe", 8).body(image_data_url(png_images.png_image(width, height)))
    return requests.post(host.url(port) + "/v1/chat/completions", data=body, timeout=60,
                         headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})


def diagnosed(diagnosis, host):
    """(state, the rules of the errors found, the findings) of host in the fleet's diagnosis (doctor.json). Warnings
    are left out: the twin's hosts run on this machine's few CPUs, and vLLM-Ascend's CPU binding says so (as it
    would on a small real host)."""
    (row,) = [row for row in diagnosis["hosts"] if row["host"] == host]
    return row["state"], [item["rule"] for item in row["findings"] if item["severity"] == "error"], row["findings"]


def assert_named(diagnosis, host, named, healthy=()):
    """The doctor named on host each rule of named (rule -> a word of its evidence) with its fix, and no error it
    does not explain; the hosts in healthy are healthy."""
    state, rules, findings = diagnosed(diagnosis, host)
    assert state == "unhealthy" and sorted(rules) == sorted(named), (
        host, [(item["rule"], item["evidence"]) for item in findings])
    (row,) = [row for row in diagnosis["hosts"] if row["host"] == host]
    for rule, evidence in named.items():
        (found,) = [item for item in findings if item["rule"] == rule]
        assert evidence in found["evidence"] and found["fix"], found
        assert rule in row["summary"] and "Fix: " + found["fix"] in row["summary"], row["summary"]
    for other in healthy:
        assert diagnosed(diagnosis, other)[:2] == ("healthy", []), diagnosed(diagnosis, other)


def test_a_chip_opens_in_one_container_only_and_a_deploy_names_who_holds_it(fleet):
    """Someone's test container on NPU 3: the stand-in refuses a chip another holds, as the driver does, and the
    deploy stops before touching our container, naming the other one."""
    host = fleet[DUAL]
    script = host.read_text("/etc/vllm-ascend/%s.sh" % NAME)
    rogue = script.replace("--name %s " % NAME, "--name llm-test ").replace(":%d:" % PORT, ":%d:" % (PORT + 50))
    rogue = "\n".join(line for line in rogue.splitlines()
                      if not re.search(r"/dev/davinci[23]:|ascend-vllm-fleet\.", line)) + "\n"
    before = host.inspect(NAME)["Id"]
    host.docker("stop", NAME)
    try:
        host.exec("sh", "-c", "cat > /tmp/rogue.sh && sh /tmp/rogue.sh", input=rogue)
        wait_for_log(host, "llm-test", "NPU chips opened: davinci0 davinci1")
        host.docker("start", NAME)
        wait_for_log(host, NAME, "resources are busy")
        run, diagnosis = fleet.doctor()
        assert run.rc == 0, run.stdout
        assert_named(diagnosis, DUAL, {"foreign_holder": "container llm-test maps /dev/davinci0"},
                     healthy=[REMAPPED])
        run = fleet.play(*SERVER, "--limit", DUAL, **{DUAL: {"vllm_server_max_model_len": 4096}})
        assert run.rc != 0
        text = run.failure_text(DUAL)
        assert "container llm-test maps /dev/davinci0, /dev/davinci1" in text, text
        assert host.inspect(NAME)["Id"] == before, "our container was replaced while the chips were held"
    finally:
        host.docker("rm", "-f", "llm-test", check=False)
        # Docker waits longer after each failed start (up to a minute): the chips are free, start it now.
        host.docker("restart", NAME, check=False)
    fleet.restore()  # our container, stopped for the test, started again where its restart policy has not yet
    assert host.inspect(NAME)["State"]["Running"]


def wait_for_log(host, container, text, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        logs = host.docker("logs", container, check=False)
        if text in logs.stdout + logs.stderr:
            return
        time.sleep(0.5)
    raise AssertionError("%s never logged %r: %s" % (container, text, logs.stdout + logs.stderr))


def test_a_missing_mount_source_fails_before_docker_makes_it_an_empty_folder(fleet):
    host = fleet[DUAL]
    before = host.inspect(NAME)["Id"]
    run = fleet.play(*SERVER, "--limit", DUAL, "-e", "fleet_dcmi_dir=/usr/local/dcmi-gone")
    assert run.rc != 0
    text = run.failure_text(DUAL)
    assert "/usr/local/dcmi-gone (set by fleet_dcmi_dir)" in text, text
    assert host.inspect(NAME)["Id"] == before and not host.exists("/usr/local/dcmi-gone")


def test_a_refused_key_fails_at_once_with_the_cause(fleet):
    """vLLM answers /health without the key and 401 on /v1/*: waiting out the ready timeout cannot help."""
    run = fleet.play(*SERVER, "--limit", DUAL, **{DUAL: {"vllm_server_extra_args": ["--api-key", "not-the-fleets-key"],
                                                "vllm_server_ready_timeout": 900}})
    assert run.rc != 0
    text = run.failure_text(DUAL)
    assert "the server refuses the API key: /v1/models answered 401" in text, text
    assert "The previous container is serving again" in text
    assert fleet.restore() is None, "the rollback left the host as before"


def test_jemalloc_is_preloaded_in_the_container(fleet):
    host = fleet[DUAL]
    environment = host.inspect(NAME)["Config"]["Env"]
    assert [item for item in environment if item.startswith("LD_PRELOAD=") and "libjemalloc.so.2" in item]
    assert "INFO jemalloc preloaded" in host.docker("logs", NAME).stdout
    wrong = "/usr/lib/jemalloc-not-here/libjemalloc.so.2"
    run = fleet.play(*SERVER, "--limit", DUAL, **{DUAL: {"vllm_server_jemalloc_path": wrong}})
    assert run.rc != 0
    text = run.failure_text(DUAL)
    assert wrong + " is not in the container" in text and "The previous container is serving again" in text, text


def test_a_large_image_crashes_an_uncapped_engine_and_verify_names_the_crash(fleet):
    host, key = fleet[DUAL], fleet.api_key()
    capped = chat(host, PORT, key, 2560, 1440)  # the default cap resizes it below what crashes the engine
    assert capped.status_code == 200, capped.text
    run = fleet.play(*SERVER, "--limit", DUAL, **{DUAL: {"vllm_server_max_pixels": 0}})
    assert run.rc == 0, run.stdout
    crashed = chat(host, PORT, key, 2560, 1440)
    assert crashed.status_code == 500 and "EngineCore encountered an issue" in crashed.text, crashed.text
    # The server exits at its watchdog's next look, and Docker starts it again: until then there is no crash to
    # name, only an engine that answers 503.
    wait_until(lambda: host.inspect(NAME)["RestartCount"] > 0, "Docker restarts the crashed server on %s" % DUAL, 120)
    code, output = fleet.verify(hosts=[DUAL], **{DUAL: {"vllm_server_max_pixels": 0}})
    assert code != 0 and "instance %s: crashed and was restarted by Docker" % NAME in output, output
    # Once Docker's restart serves, the crash is history: a warning that explains the dead engine and the restart
    # (one cause, not three), the host healthy.
    wait_until(lambda: serves_now(fleet, DUAL), "%s serves again" % DUAL)
    run, diagnosis = fleet.doctor()
    assert run.rc == 0, run.stdout
    state, errors, findings = diagnosed(diagnosis, DUAL)
    assert (state, errors) == ("healthy", []), findings
    (crash,) = [item for item in findings if item["rule"] == "large_image_crash"]
    assert "507018" in crash["evidence"] and crash["history"].endswith("it has served since"), crash
    assert not [item for item in findings if item["rule"] in ("engine_dead", "restarts")], findings
    assert diagnosed(diagnosis, REMAPPED)[:2] == ("healthy", [])
    assert fleet.restore().rc == 0
    assert chat(host, PORT, key, 2560, 1440).status_code == 200


@pytest.fixture(scope="class")
def switched(deployed):
    """Both hosts switched to per_card in one server-phase run, npu-dual's instances loading slowly, for the tests
    of TestPerCard, which only read what the switch made; put back after them."""
    with deployed.guarded():
        # 30 s each on the twin; the ready timeout, also vLLM's wait for its engine, covers the load.
        slow = {"VLLM_TWIN_SPEED": "40", "VLLM_TWIN_LOAD_S": "1200"}
        run = deployed.play(*SERVER, "--limit", "%s,%s" % (DUAL, REMAPPED), **{
            DUAL: dict(PER_CARD, vllm_server_extra_env=slow, vllm_server_ready_timeout=1500), REMAPPED: PER_CARD})
        assert run.rc == 0, run.stdout
        yield deployed
        assert deployed.restore().rc == 0


class TestPerCard:
    """What one switch of both hosts to per_card makes: chips by physical id, CPUs of one node shared out,
    instances loading together."""

    def test_chips_are_mapped_by_physical_id(self, switched):
        """remapped_duo2: NPU 6's chips have logic ids 0, 1 but are /dev/davinci4 and 5."""
        host = switched[REMAPPED]
        for instance, nodes in ((NAME + "-npu6", ["davinci4", "davinci5"]),
                                (NAME + "-npu224", ["davinci0", "davinci1"])):
            mapped = sorted(d["PathOnHost"] for d in host.inspect(instance)["HostConfig"]["Devices"]
                            if re.search(r"/davinci\d+$", d["PathOnHost"]))
            assert mapped == ["/dev/" + node for node in nodes], (instance, mapped)

    def test_per_card_instances_on_one_numa_node_get_disjoint_cpus(self, switched):
        """Without a cpuset each container sees every CPU of the node, and vLLM-Ascend pins both to the same
        cores."""
        host, allowed = switched[DUAL], []
        for instance in (NAME + "-npu3", NAME + "-npu7"):
            assert host.inspect(instance)["HostConfig"]["CpusetCpus"], instance
            # What the server itself was allowed, as its CPU binding recorded it.
            record = json.loads(host.read_text("/var/cache/vllm-ascend/vllm-twin/cpus/%s.json"
                                               % "-".join(opened_chips(host, instance))))
            allowed.append(set(record["allowed"]))
        assert allowed[0] and allowed[1] and not allowed[0] & allowed[1], allowed

    def test_a_hosts_instances_load_together(self, switched):
        """Every per_card container is started before the first of them has loaded."""
        host = switched[DUAL]
        started, ready = [], []
        for instance in (NAME + "-npu3", NAME + "-npu7"):
            started.append(host.inspect(instance)["State"]["StartedAt"][:26])
            lines = host.docker("logs", "--timestamps", instance).stdout.splitlines()
            ready.append(next(line.split()[0][:26] for line in lines if "Starting vLLM API server" in line))
        assert max(started) < min(ready), (started, ready)

    def test_a_load_longer_than_vllms_own_engine_wait_serves_at_the_first_start(self, switched):
        """vLLM 0.18 gives up on its engine after 600 s by default: a 1200 s load (slow disk, NFS model folder)
        would exit and restart in a loop. The container gets the role's wait (vllm_server_ready_timeout)."""
        host = switched[DUAL]
        for instance in (NAME + "-npu3", NAME + "-npu7"):
            state = host.inspect(instance)
            assert "VLLM_ENGINE_READY_TIMEOUT_S=1500" in state["Config"]["Env"], state["Config"]["Env"]
            assert state["RestartCount"] == 0 and state["State"]["Running"], (instance, state["State"])
            assert "Timed out waiting for engine core" not in host.docker("logs", instance).stderr


def test_an_instance_answering_garbage_fails_its_host_everywhere_and_the_others_serve(fleet, tmp_path):
    """fp16 overflow on 310P: HTTP 200 and `!!!!`. The deploy fails that host with the answer quoted and serves the
    other, the verification fails it alone, its benchmark rows are marked; a fluent wrong answer fails `known` and
    passes `sane`."""
    host = fleet[REMAPPED]
    answers = "/var/cache/vllm-ascend/vllm-twin/answers-%d" % PORT  # the stand-in's /root/.cache/vllm-twin

    def model_answers(mode):
        host.exec("sh", "-c", "cat > %s" % answers, input=mode)

    before = {name: fleet[name].inspect(NAME)["Id"] for name in (DUAL, REMAPPED)}
    model_answers("bang")
    try:
        run = fleet.play(*SERVER)
        assert run.rc != 0
        text = run.failure_text(REMAPPED)
        assert "%s on %s does not serve" % (NAME, REMAPPED) in text and "is degenerate" in text, text
        assert '\\"!!!!!!!!' in text and "float16" in text, text
        assert run.failure_text(DUAL) == "", "the healthy host failed too"
        assert {name: fleet[name].inspect(NAME)["Id"] for name in (DUAL, REMAPPED)} == before

        fleet.write()
        code, output = fleet.verify()
        failed = [host for host, (_ok, _changed, _unreachable, failures) in recap(output).items() if failures]
        assert code != 0 and failed == [REMAPPED], output
        assert "is degenerate" in output

        reports = tmp_path / "reports"
        run = fleet.play("--limit", REMAPPED, "-e", "vllm_bench_reports_dir=%s" % reports, *SMALL_BENCH_PLAY,
                         playbook="playbooks/benchmark.yml")
        assert run.rc == 0, run.stdout
        (report_dir,) = list(reports.iterdir())
        summary = json.loads((report_dir / "summary.json").read_text())
        assert summary["answers_failed"] == [{"host": REMAPPED, "instance": NAME}]
        assert summary["recommended"] == [], "garbage was recommended"
        rows = (report_dir / "results.csv").read_text().splitlines()
        assert len(rows) == 1 + 4 and all(row.endswith(",failed") for row in rows[1:]), rows[:2]

        run, diagnosis = fleet.doctor("-e", "doctor_bundle=true")
        assert run.rc == 0, run.stdout
        assert_named(diagnosis, REMAPPED, {"degenerate_answers": "!!!!"}, healthy=[DUAL])
        bundles_hold_every_item_and_no_key(fleet, diagnosis)

        model_answers("wrong")
        run = fleet.play(*SERVER, "--limit", REMAPPED)
        assert run.rc != 0
        text = run.failure_text(REMAPPED)
        assert "the answer check (known) failed" in text and "There are 5 squares." in text, text
        assert "expected 3 (or three)" in text, text
        assert fleet.play(*SERVER, "--limit", REMAPPED, "-e", "fleet_answer_check=sane").rc == 0
    finally:
        host.exec("rm", "-f", answers)  # healthy again: the container itself was never changed


# What a support bundle holds for a host of this collection (library/support_bundle.py); each instance's folder too.
BUNDLE_ITEMS = ("doctor.json", "plan.json", "MANIFEST.json", "npu-smi/info.txt", "npu-smi/info-m.txt",
                "npu-smi/topo.txt", "driver/driver-version.info", "driver/firmware-version.info",
                "driver/ascend_install.info", "driver/modules.txt", "kernel-npu.log", "docker/ps.txt",
                "docker/version.txt", "docker/info.txt", "system/disks.json", "system/df.txt", "system/meminfo.txt",
                "tuning.txt")
INSTANCE_ITEMS = ("inspect.json", "state.json", "log.txt", "script.sh")


def bundles_hold_every_item_and_no_key(fleet, diagnosis):
    """Each host's bundle, fetched and indexed, holds every item, per card npu-smi's board, health and memory, and
    nowhere the fleet's key; what it could not read (the twin's hosts have no msnpureport) its manifest says."""
    key = fleet.api_key().encode()
    for row in diagnosis["hosts"]:
        path = fleet.base / "doctor" / str(fleet.runs) / row["bundle"]["file"]
        with tarfile.open(path) as tar:
            members = {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}
        names = {name.split("/", 1)[1] for name in members}
        wanted = set(BUNDLE_ITEMS) | set("instances/%s/%s" % (NAME, item) for item in INSTANCE_ITEMS)
        assert wanted <= names, (row["host"], sorted(wanted - names))
        for query in ("board", "health", "memory"):
            assert [name for name in names if name.startswith("npu-smi/%s-" % query)], (row["host"], query)
        assert not [name for name, data in members.items() if key in data], row["host"]
        inspected = json.loads(members["%s/instances/%s/inspect.json" % (row["host"], NAME)])
        assert "Env" not in inspected["Config"] and inspected["Name"] == "/" + NAME
        assert json.loads(members["%s/doctor.json" % row["host"]])["summary"] == row["summary"]
        manifest = json.loads(members["%s/MANIFEST.json" % row["host"]])
        assert "msnpureport/" in manifest["missing"], manifest
        assert row["bundle"]["size"] == path.stat().st_size


PROFILE = "/usr/local/dcmi/npu-smi-twin.json"  # the npu-smi emulator's host profile (tests/twin/npu_smi.py)
DRIVER_VERSION = "/usr/local/Ascend/driver/version.info"
# What a host's own programs write while the doctor reads it: the kernel's, SSH's logins, Ansible's module folder,
# Docker's container logs and the servers' request logs (an answer check is a request).
WRITTEN_BY_OTHERS = ("/proc", "/sys", "/dev", "/run", "/var/lib/docker", "/var/log", "/var/cache/vllm-ascend",
                     "/root/.ansible", "/tmp/doctor-marker")


def host_snapshot(host):
    """A host's containers as they run (id, start, restarts, status) and a marker to find files written after it."""
    host.exec("touch", "/tmp/doctor-marker")
    time.sleep(1.1)  # file times have a second's resolution on some file systems
    return host.docker("ps", "-aq", "--no-trunc").stdout.split(), host.docker(
        "inspect", "-f", "{{.Id}} {{.State.StartedAt}} {{.RestartCount}} {{.State.Status}}",
        *host.docker("ps", "-aq").stdout.split()).stdout


def written_since_snapshot(host):
    prune = " -o ".join("-path %s" % path for path in WRITTEN_BY_OTHERS)
    return host.exec("sh", "-c", "find / -xdev \\( %s \\) -prune -o -newer /tmp/doctor-marker -type f -print"
                     % prune).stdout.split()


def test_the_doctor_names_npu_faults_and_a_stopped_instance_and_changes_nothing(fleet):
    """A chip made unhealthy, a driver installed but not loaded, dcmi -8005 and -8020, a stopped instance: each named
    on its host, from what npu-smi and Docker say. The hosts are compared before and after the first run; the second
    runs in check mode, as the doctor reads the same either way."""
    dual, remapped = fleet[DUAL], fleet[REMAPPED]
    profile, version = dual.read_text(PROFILE), remapped.read_text(DRIVER_VERSION)
    remapped_profile = remapped.read_text(PROFILE)

    def put(host, path, text):
        host.exec("sh", "-c", "cat > %s" % path, input=text)

    try:
        unhealthy = json.loads(profile)
        unhealthy["cards"][0].setdefault("chips", [{}, {}])
        unhealthy["cards"][0]["chips"][-1]["health"] = "Alarm"
        put(dual, PROFILE, json.dumps(unhealthy))
        put(remapped, DRIVER_VERSION, re.sub(r"(?m)^Version=.*$", "Version=25.5.9", version))
        before = {name: host_snapshot(fleet[name]) for name in (DUAL, REMAPPED)}
        run, diagnosis = fleet.doctor()
        assert run.rc == 0, run.stdout
        assert_named(diagnosis, DUAL, {"chip_unhealthy": "health Alarm"})
        assert_named(diagnosis, REMAPPED, {"driver_not_loaded": "version.info says 25.5.9"})
        for name in (DUAL, REMAPPED):
            assert written_since_snapshot(fleet[name]) == [], name
            assert host_snapshot(fleet[name]) == before[name], name

        put(dual, PROFILE, json.dumps(dict(json.loads(profile), failure="-8005")))
        put(remapped, DRIVER_VERSION, version)
        put(remapped, PROFILE, json.dumps(dict(json.loads(remapped_profile), failure="-8020")))
        remapped.docker("stop", NAME)
        run, diagnosis = fleet.doctor("--check")
        assert run.rc == 0, run.stdout
        assert_named(diagnosis, DUAL, {"dcmi_8005": "ret is -8005"})
        assert_named(diagnosis, REMAPPED, {"dcmi_8020": "ret is -8020", "instance_stopped": "exited"})
    finally:
        put(dual, PROFILE, profile)
        put(remapped, PROFILE, remapped_profile)
        put(remapped, DRIVER_VERSION, version)
        remapped.docker("start", NAME)
    wait_until(lambda: serves_now(fleet, REMAPPED), "%s serves again" % REMAPPED)
