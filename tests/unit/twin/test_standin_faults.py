"""The stand-in's host-facing behaviour: chips it holds, what it refuses, how it crashes, binds and authenticates.

Everything runs in this process over a twin host root (``VLLM_TWIN_ROOT``: tests/standin_host.py), without Docker.
"""
import base64
import json
import os
import signal
import threading

import pytest
import requests
from standin_host import MODEL, root, serve_args  # noqa: F401  (the fixture)
from standin_process import health_answers

from conftest import png_image
from twin import hosts
from twin.vllm_standin import cli, npu, server

# npu-smi info -t topo as a 310P Duo host prints it: a header ending in "CPU Affinity", a row per chip.
TOPO = """\t   NPU0       NPU1       NPU2       NPU3       CPU Affinity
NPU0       X          HCCS       SYS        SYS        0-7
NPU1       HCCS       X          SYS        SYS        0-7
NPU2       SYS        SYS        X          HCCS       8-15
NPU3       SYS        SYS        HCCS       X          8-15

Legend:

  X    = Self
"""


def test_a_second_holder_of_a_chip_is_refused_until_the_first_releases_it(root):  # noqa: F811
    opened = npu.open_chips(2)
    assert [(os.path.basename(node), logical, physical) for node, logical, physical in opened] == [
        ("davinci0", 0, 0), ("davinci1", 1, 1)]
    with pytest.raises(cli.Refusal) as refused:
        npu.open_chips(2)
    assert "drvRet=87" in refused.value.lines[0]
    assert "Resource_Busy(EL0005): The resources are busy." in refused.value.lines
    assert str(refused.value).startswith("RuntimeError: Initialize NPU function error: aclInit, error code is 507899")
    npu.release_chips()
    assert len(npu.open_chips(2)) == 2


def test_claims_are_named_by_the_device_number_docker_keeps(root):  # noqa: F811
    npu.open_chips(1)
    claims = os.listdir(cli.host_path("/root/.cache/vllm-twin/chips"))
    assert claims == ["240-0"]


def test_main_refuses_a_busy_chip_with_the_driver_lines_and_exit_1(root, capsys):  # noqa: F811
    npu.open_chips(2)
    assert cli.main(["serve", str(root / "data/models" / MODEL), "--max-model-len", "8192", "-tp", "2",
                     "--dtype", "float16"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors[0] == "ERROR CheckHaveDevice:Call halGetDeviceInfo failed: drvRet=87, module type=0, info type=1."
    assert "davinci0 is already opened" in errors[-1]


def test_other_chips_of_the_host_stay_free(root, monkeypatch):  # noqa: F811
    npu.open_chips(2)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "2,3")
    assert [logical for _, logical, _ in npu.open_chips(2)] == [0, 1]


def test_chip_nodes_sort_by_number(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_TWIN_ROOT", str(tmp_path))
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    (tmp_path / "dev").mkdir()
    for name in ("davinci10", "davinci2", "davinci1", "davinci_manager", "davinci3x"):
        (tmp_path / "dev" / name).write_text("")
    assert [os.path.basename(node) for node in npu.visible_devices()] == ["davinci1", "davinci2", "davinci10"]
    assert npu.chip_identity(str(tmp_path / "dev/davinci10")) == ("file:10", 10)


def test_ascend_rt_visible_devices_picks_logical_ids_and_ascend_visible_devices_does_not(root,  # noqa: F811
                                                                                         monkeypatch):
    monkeypatch.setenv("ASCEND_VISIBLE_DEVICES", "2,3")  # read by Ascend Docker Runtime only
    assert [os.path.basename(node) for node in npu.visible_devices()] == ["davinci0", "davinci1", "davinci2",
                                                                          "davinci3"]
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3,1")
    assert [os.path.basename(node) for node in npu.visible_devices()] == ["davinci3", "davinci1"]
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4")
    with pytest.raises(cli.Refusal, match=r"set ASCEND_RT_VISIBLE_DEVICES:\[4\] error, input data rang\[0-4\)"):
        npu.visible_devices()


def test_topo_rows_give_each_logical_chip_its_affinity():
    assert npu.parse_topo(TOPO) == {0: list(range(8)), 1: list(range(8)), 2: list(range(8, 16)),
                                    3: list(range(8, 16))}
    assert npu.parse_topo("\tNPU0  CPU Affinity\nNPU0  X  NA\nNPU1  X  0-3,8\n") == {1: [0, 1, 2, 3, 8]}
    assert npu.parse_topo("This device does not support querying topo.\n") == {}


def test_topo_of_the_twin_npu_smi_parses(root):  # noqa: F811
    affinity = npu.parse_topo(npu.npu_smi("-t", "topo"))
    assert sorted(affinity) == [0, 1, 2, 3] and all(affinity.values())


def test_two_chips_of_one_node_share_it_and_the_next(root):  # noqa: F811
    # vllm-ascend's own example: both chips on NUMA0 grow into NUMA1, then split the pool evenly.
    pools = npu.plan_cpus([0, 1], npu.parse_topo(TOPO), range(16))
    assert pools == {0: list(range(8)), 1: list(range(8, 16))}


def test_a_cpuset_outside_the_chips_affinity_or_too_small_fails_binding():
    with pytest.raises(RuntimeError, match="conflict with NUMA affinity"):
        npu.plan_cpus([0], npu.parse_topo(TOPO), [20, 21])
    with pytest.raises(RuntimeError, match="at least 5 CPUs"):
        npu.plan_cpus([0, 1], npu.parse_topo(TOPO), [0, 1, 2, 3])


def test_binding_pins_the_worker_cpus_and_records_them(root, monkeypatch, capsys):  # noqa: F811
    bound = []
    monkeypatch.setattr(npu.os, "sched_getaffinity", lambda pid: set(range(48, 96)))
    monkeypatch.setattr(npu.os, "sched_setaffinity", lambda pid, cpus: bound.append(sorted(cpus)))
    opened = npu.open_chips(2)
    cpus = npu.bind_cpus(opened, 8000, None)
    # duo2: every chip's affinity is 48-71; the two chips split it, each keeping 2 IRQ, 1 ACL, 1 release CPU.
    assert cpus == list(range(50, 58)) + list(range(62, 70)) and bound == [cpus]
    record = json.loads((root / "root/.cache/vllm-twin/cpus/davinci0-davinci1.json").read_text())
    assert record["bound"] == cpus and record["plan"] == {"0": list(range(48, 60)), "1": list(range(60, 72))}
    assert "INFO bound to CPUs 50,51" in capsys.readouterr().out


def test_binding_is_skipped_when_disabled_or_impossible(root, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(npu.os, "sched_setaffinity", pytest.fail)
    opened = npu.open_chips(2)
    assert npu.bind_cpus(opened, 8001, {"enable_cpu_binding": False}) == []
    record = json.loads((root / "root/.cache/vllm-twin/cpus/davinci0-davinci1.json").read_text())
    assert record["skipped"] == "enable_cpu_binding is false" and record["port"] == 8001
    monkeypatch.setattr(npu.os, "sched_getaffinity", lambda pid: {0, 1})
    assert npu.bind_cpus(opened, 8002, {}) == []
    assert "WARNING Bind cpus failed in rank0: CPUs available in 'Cpus_allowed_list' conflict" in (
        capsys.readouterr().out)


def test_jemalloc_counts_as_preloaded_only_when_named_and_present(root, monkeypatch, capsys):  # noqa: F811
    assert not cli.jemalloc_preloaded()
    monkeypatch.setenv("LD_PRELOAD", cli.JEMALLOC + ":")
    assert not cli.jemalloc_preloaded()  # named, but no such file
    library = root / cli.JEMALLOC.lstrip("/")
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_bytes(b"")
    assert cli.jemalloc_preloaded()
    cli.report_jemalloc()
    monkeypatch.delenv("LD_PRELOAD")
    cli.report_jemalloc()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "INFO jemalloc preloaded: " + cli.JEMALLOC
    assert out[1].startswith("WARNING jemalloc is not preloaded")


def chat(width, height, stream=False):
    url = "data:image/png;base64," + base64.b64encode(png_image(width, height)).decode()
    return {"model": MODEL, "max_tokens": 16, "stream": stream, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "描述一下图片"}]}]}


def test_resized_pixels_decide_the_crash():
    assert server.prompt_stats(chat(2560, 1440))[1] == 2560 * 1440
    assert server.prompt_stats(chat(1920, 1080))[1] == 1920 * 1088 < server.DEFAULT_CRASH_PIXELS
    assert server.prompt_stats(chat(2560, 1440), max_pixels=1310720)[1] <= 1310720


def run_serve(args):
    """serve() on a thread; returns a dict that gets its exit status."""
    result = {}
    model = cli.host_path("/data/models/" + MODEL)
    thread = threading.Thread(target=lambda: result.update(status=server.serve(args, model, {})), daemon=True)
    thread.start()
    url = "http://127.0.0.1:%d" % args.port
    health_answers(url, 20, statuses=None)  # any answer: a test may start it to die or to refuse
    return url, thread, result


def test_a_large_image_kills_the_engine_and_fails_every_request(root):  # noqa: F811
    url, thread, result = run_serve(serve_args())
    answers = {}

    def stream():
        with requests.post(url + "/v1/chat/completions", json=dict(chat(640, 480, True), max_tokens=4000,
                                                                    ignore_eos=True), stream=True) as response:
            answers["stream"] = (response.status_code, [line for line in response.iter_lines() if line])

    streaming = threading.Thread(target=stream)
    streaming.start()
    threading.Event().wait(0.3)
    # Bounds against a hang, not timings: reading a 2560x1440 picture takes seconds on a loaded machine.
    crashed = requests.post(url + "/v1/chat/completions", json=chat(2560, 1440), timeout=180)
    streaming.join(timeout=180)
    thread.join(timeout=180)
    body = {"error": {"message": server.ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None,
                      "code": 500}}
    assert (crashed.status_code, crashed.json()) == (500, body)
    status, lines = answers["stream"]
    assert status == 200 and json.loads(lines[-2][len(b"data: "):]) == body and lines[-1] == b"data: [DONE]"
    assert result["status"] == 1


@pytest.mark.parametrize("extra,env", [(["--mm-processor-kwargs", '{"min_pixels": 65536, "max_pixels": 1310720}'],
                                        {}),
                                       ([], {"VLLM_TWIN_CRASH_PIXELS": "0"})])
def test_a_pixel_cap_or_a_zero_threshold_keeps_the_engine_alive(root, monkeypatch, extra, env):  # noqa: F811
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = serve_args(*extra)
    model = cli.host_path("/data/models/" + MODEL)
    running = server.start_server(args, model, {})
    try:
        answer = requests.post("http://127.0.0.1:%d/v1/chat/completions" % args.port, json=chat(2560, 1440),
                               timeout=30)
        assert answer.status_code == 200 and running.state.engine.alive
    finally:
        running.shutdown()


def test_the_api_key_guards_v1_only_as_vllm_does(root):  # noqa: F811
    args = serve_args("--api-key", "sekret")
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    url = "http://127.0.0.1:%d" % args.port
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"},
                        {"Authorization": "Basic sekret"}):
            for path in ("/v1/models", "/v1/nothing-here"):
                answer = requests.get(url + path, headers=headers, timeout=5)
                assert (answer.status_code, answer.content) == (401, b'{"error":"Unauthorized"}')
            assert requests.post(url + "/v1/chat/completions", json=chat(64, 64), headers=headers,
                                 timeout=5).status_code == 401
        for path in ("/health", "/metrics", "/version"):
            assert requests.get(url + path, timeout=5).status_code == 200
        for scheme in ("Bearer", "bearer", "BEARER"):
            assert requests.get(url + "/v1/models", headers={"Authorization": scheme + " sekret"},
                                timeout=5).status_code == 200
    finally:
        running.shutdown()


def test_invocations_and_tokenize_answer_without_the_key_as_vllm_0_18_does(root):  # noqa: F811
    """The hole real vLLM 0.18 has: SageMaker's /invocations runs a chat completion and /tokenize counts tokens,
    neither under /v1, so --api-key does not guard them. The gateway lets neither through."""
    args = serve_args("--api-key", "sekret")
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    url = "http://127.0.0.1:%d" % args.port
    try:
        answer = requests.post(url + "/invocations", json=chat(64, 16), timeout=30)
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"], answer.text
        counted = requests.post(url + "/tokenize", json={"prompt": "what is in the picture?"}, timeout=5).json()
        assert counted["count"] == len(counted["tokens"]) > 0 and counted["max_model_len"] == args.max_model_len
        assert requests.post(url + "/tokenize", json=chat(64, 16), timeout=5).json()["count"] > 64
        assert requests.post(url + "/nothing-here", json=chat(64, 16), timeout=5).status_code == 404
    finally:
        running.shutdown()


@pytest.mark.parametrize("damage,error", [
    (lambda whole: whole[:-3], "MetadataIncompleteBuffer"),
    (lambda whole: b"twin placeholder weights\n", "HeaderTooLarge"),
    (lambda whole: whole[:8] + b"{" * (len(whole) - 8), "InvalidHeaderDeserialization"),
])
def test_a_shard_the_safetensors_loader_cannot_read_stops_the_load(tmp_path, damage, error):
    """As vLLM's loader (safetensors) refuses it: a copy cut short, or bytes of no safetensors file."""
    model = tmp_path / MODEL
    hosts.build_model(model)
    shard = model / "model-00003-of-00004.safetensors"
    assert cli.load_model_config(str(model))["architectures"]
    shard.write_bytes(damage(shard.read_bytes()))
    with pytest.raises(cli.Refusal, match="SafetensorError: Error while deserializing header: " + error):
        cli.load_model_config(str(model))


def assert_serves(args):
    """The stand-in loads and answers /health with 200; it is shut down after."""
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    try:
        assert requests.get("http://127.0.0.1:%d/health" % args.port, timeout=5).status_code == 200
    finally:
        running.shutdown()
        running.server_close()


@pytest.mark.parametrize("ready_timeout,served", [(None, False), ("1200", True)])
def test_a_load_longer_than_vllms_engine_wait_exits_unless_the_wait_is_raised(root, monkeypatch, capsys,  # noqa: F811
                                                                             ready_timeout, served):
    """vLLM 0.18 waits 600 s for its engine core by default: a 700 s load (slow disk, NFS) exits, and Docker's
    restart policy starts it again, in a loop; VLLM_ENGINE_READY_TIMEOUT_S=1200 lets it serve."""
    monkeypatch.setenv("VLLM_TWIN_LOAD_S", "700")
    monkeypatch.setenv("VLLM_TWIN_SPEED", "2000")  # 0.35 s of load, 0.3 s of vLLM's default wait
    if ready_timeout:
        monkeypatch.setenv("VLLM_ENGINE_READY_TIMEOUT_S", ready_timeout)
    else:
        monkeypatch.delenv("VLLM_ENGINE_READY_TIMEOUT_S", raising=False)
    if served:
        assert_serves(serve_args())
    else:
        assert server.serve(serve_args(), cli.host_path("/data/models/" + MODEL), {}) == 1
        assert "Timed out waiting for engine core processes to start. Waited 600 seconds" in capsys.readouterr().err


def test_an_image_built_for_another_chip_loads_then_exits_with_vllm_ascends_socversion_error(root, monkeypatch,  # noqa: F811
                                                                                           capsys):
    """An A2 (910B) image on a 310P3 host: vllm-ascend issues #2725, #5599, #6676."""
    monkeypatch.setenv("SOC_VERSION", "ascend910b1")
    assert server.serve(serve_args(), cli.host_path("/data/models/" + MODEL), {}) == 1
    assert ("[ERROR] the socversion Ascend910B1 of bin package does not match the current device socverison "
            "Ascend310P3.") in capsys.readouterr().err
    monkeypatch.setenv("SOC_VERSION", "ascend310p1")
    assert_serves(serve_args())


def test_sigusr1_kills_the_engine_as_a_killed_enginecore_process_and_the_server_exits(root, capsys,  # noqa: F811
                                                                                       monkeypatch):
    started = []
    start_server = server.start_server
    monkeypatch.setattr(server, "start_server", lambda *args: started.append(start_server(*args)) or started[-1])
    url, thread, result = run_serve(serve_args())
    assert requests.get(url + "/health", timeout=30).status_code == 200
    engine = started[0].state.engine
    server.engine_killer(engine)(signal.SIGUSR1, None)
    assert engine.died.wait(30)
    assert requests.get(url + "/health", timeout=30).status_code == 503
    crashed = requests.post(url + "/v1/chat/completions", json=chat(640, 480), timeout=60)
    assert crashed.status_code == 500 and crashed.json()["error"]["message"] == server.ENGINE_DEAD_MESSAGE
    thread.join(timeout=60)
    assert result["status"] == 1
    assert "Engine core proc EngineCore_DP0 died unexpectedly" in capsys.readouterr().out
