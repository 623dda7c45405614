"""A serving host's driver change: its instances are drained on the gateway and stopped before the packages run,
put back on the gateway after, and site.yml then starts them and the gateway serves them again."""
import json
import time
import urllib.request

import pytest

from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import PlayFleet

pytestmark = pytest.mark.docker
HOST, GATEWAY = "dd-ascend", "dd-gateway"
BACKEND = "vllm_instances"
STATS = ("import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/haproxy/admin.sock'); "
         "s.sendall(b'show servers state %s\\n'); print(s.makefile().read())" % BACKEND)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    # Deployed on its 24.1.rc2 driver without preflight, as a fleet that ran before preflight refused 24.x.
    fleet = PlayFleet(tmp_path_factory.mktemp("driver-drain"), {HOST: "driver_24_1_rc2", GATEWAY: "gateway"})
    run = fleet.play()
    assert run.rc == 0, run.stdout
    yield fleet
    fleet.down()


def admin_state(fleet):
    """The instance's administrative state on the gateway (HAProxy's srv_admin_state: 0 ready, 8 drain)."""
    lines = fleet[GATEWAY].exec("python3", "-c", STATS).stdout.splitlines()
    header = lines[1].lstrip("# ").split()
    (row,) = [dict(zip(header, line.split())) for line in lines[2:] if line.strip()]
    return int(row["srv_admin_state"])


def models(fleet):
    request = urllib.request.Request(fleet[GATEWAY].url(8080) + "/v1/models",
                                     headers={"Authorization": "Bearer %s" % fleet.api_key()})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_the_instances_are_drained_stopped_and_come_back(fleet):
    assert models(fleet)["data"], "the gateway serves before the change"
    run = fleet.play(playbook="playbooks/driver.yml")
    assert run.rc == 0, run.stdout
    drained = run.results("Stop sending new requests to the instances")
    assert drained[HOST]["_event"] == "runner_on_ok" and drained[HOST]["changed"], drained
    assert run.results("Stop the instances")[HOST]["changed"]
    container = fleet[HOST].inspect(NAME)
    assert container is not None and not container["State"]["Running"]
    # Put back: ready again on the gateway, out of rotation only by its failing health checks.
    assert admin_state(fleet) == 0
    run = fleet.play()
    assert run.rc == 0, run.stdout
    assert fleet[HOST].inspect(NAME)["State"]["Running"]
    deadline = time.time() + 30
    while True:
        try:
            assert models(fleet)["data"]
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(1)
