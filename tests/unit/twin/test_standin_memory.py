"""The stand-in's load against its chips' memory: what it learns of them, what it loads, and what it refuses with
vLLM's, vLLM-Ascend's and torch_npu's own lines (tests/twin/vllm_standin/server.py says where each comes from).

The numbers are the twin's model (tests/twin/hosts.py): 17534340096 bytes of weights (Qwen3-VL-8B-Instruct's index),
36 layers, 8 KV heads of 128, so 144 KiB of KV cache a token; 2 GiB of activations and runtime a rank; chips of
21525 and 20940 MB (48 GB Duo) or 44278 and 43693 MB (96 GB Duo), 1400 and 1460 MB of them used.
"""
import json

import pytest
from standin_host import MODEL, root, serve_args  # noqa: F401  (the fixture)

from twin import hosts
from twin.vllm_standin import cli, npu, server

OOM_HINT = " If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation."
MORE = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def host(tmp_path, monkeypatch, profile):
    """The stand-in's host is now one of this profile (a name in profiles.yml, or the profile itself)."""
    folder = tmp_path / "other-host"
    hosts.build_root(folder, hosts.load_profiles()[profile] if isinstance(profile, str) else profile)
    monkeypatch.setenv("VLLM_TWIN_ROOT", str(folder))
    return folder


def model_path():
    return cli.host_path("/data/models/" + MODEL)


def chips_of(args):
    return npu.chip_memory(npu.open_chips(cli.chips_needed(args)))


def load(args, capsys):
    """Load as the stand-in does after opening its chips; the memory lines it printed, once it serves."""
    running = server.start_server(args, model_path(), cli.load_model_config(model_path()), chips_of(args))
    running.shutdown()
    running.server_close()
    out = capsys.readouterr().out
    return [line for line in out.splitlines() if "took" in line or "KV cache" in line or "concurrency" in line]


def refusal(args, capsys):
    """serve() ends at the load with exit status 1: its last error line."""
    assert server.serve(args, model_path(), cli.load_model_config(model_path()), chips_of(args)) == 1
    captured = capsys.readouterr()
    assert "Starting vLLM API server" not in captured.out
    return captured.err.splitlines()[-1]


def test_each_chip_has_its_npu_smi_rows_memory_found_through_its_physical_id(root, tmp_path, monkeypatch):  # noqa: F811
    # davinci0 and davinci1 are logic ids 2 and 3, chips of the 48 GB card: chips taken by their node's number would
    # read the other card's.
    profile = json.loads(json.dumps(hosts.load_profiles()["remapped_duo2"]))
    profile["cards"][1]["memory_gb"] = 48
    host(tmp_path, monkeypatch, profile)
    assert npu.chip_memory(npu.open_chips(2)) == [(0, 1400, 21525), (1, 1460, 20940)]


def test_chips_npu_smi_cannot_tell_are_loaded_unchecked(root, tmp_path, monkeypatch, capsys):  # noqa: F811
    host(tmp_path, monkeypatch, "remapped_old_npu_smi")  # an npu-smi without -t phyid-remap
    assert npu.chip_memory(npu.open_chips(2)) is None
    assert capsys.readouterr().out.splitlines()[-1] == (
        "WARNING NPU memory unknown (npu-smi info -t phyid-remap -p 0 failed: Unsupported type: phyid-remap.): "
        "the memory checks at load are skipped.")
    assert server.rank_model(serve_args(), model_path(), {}) is None
    assert "the memory checks at load are skipped" in capsys.readouterr().out


def test_the_twins_model_is_what_the_load_counts(root):  # noqa: F811
    assert server.rank_model(serve_args("-tp", "1"), model_path(), cli.load_model_config(model_path())) == {
        "weights": 17534340096, "layers": 36, "kv_per_token": 144 * 1024}
    assert server.rank_model(serve_args("-tp", "2"), model_path(), cli.load_model_config(model_path())) == {
        "weights": 17534340096 // 2, "layers": 36, "kv_per_token": 72 * 1024}


@pytest.mark.parametrize("profile,extra,lines", [
    # TP2 on a 48 GB card at 0.75: (0.75 x 21525 MiB - 8.17 GiB - 2 GiB - the 128 MiB mask) / 2 = 2.74 GiB on chip 0,
    # 2.52 GiB on chip 1 (20940 MB): 287 blocks of 128 tokens x 72 KiB, 64 of them a 8192-token request.
    ("duo2_48g", ["--gpu-memory-utilization", "0.75"], [
        "(Worker_TP0 pid=%d) INFO Loading model weights took 8.1651 GB",
        "(Worker_TP1 pid=%d) INFO Loading model weights took 8.1651 GB",
        "(Worker_TP0 pid=%d) INFO Available KV cache memory: 2.74 GiB",
        "(Worker_TP1 pid=%d) INFO Available KV cache memory: 2.52 GiB",
        "INFO GPU KV cache size: 36,736 tokens",
        "INFO Maximum concurrency for 8,192 tokens per request: 4.48x",
    ]),
    ("duo2_48g", ["--gpu-memory-utilization", "0.9"], [
        "(Worker_TP0 pid=%d) INFO Loading model weights took 8.1651 GB",
        "(Worker_TP1 pid=%d) INFO Loading model weights took 8.1651 GB",
        "(Worker_TP0 pid=%d) INFO Available KV cache memory: 4.31 GiB",
        "(Worker_TP1 pid=%d) INFO Available KV cache memory: 4.06 GiB",
        "INFO GPU KV cache size: 59,008 tokens",
        "INFO Maximum concurrency for 8,192 tokens per request: 7.20x",
    ]),
    # TP1 on a 96 GB card's chip 1 (43693 MB): (32.0 - 16.33 - 2 - 0.125) / 2 GiB, 385 blocks of 144 KiB x 128.
    ("duo2", ["--gpu-memory-utilization", "0.75", "-tp", "1"], [  # on davinci1 (ASCEND_RT_VISIBLE_DEVICES=1)
        "INFO Loading model weights took 16.3301 GB",
        "INFO Available KV cache memory: 6.77 GiB",
        "INFO GPU KV cache size: 49,280 tokens",
        "INFO Maximum concurrency for 8,192 tokens per request: 6.02x",
    ]),
])
def test_a_model_that_fits_loads_and_says_what_its_kv_cache_holds(root, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                                   profile, extra, lines):
    host(tmp_path, monkeypatch, profile)
    if "-tp" in extra:
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1")
    pid = server.os.getpid()
    assert load(serve_args(*extra), capsys) == [line.replace("%d", str(pid)) for line in lines]


def test_a_model_whose_kv_cache_has_no_room_left_is_refused(root, tmp_path, monkeypatch, capsys):  # noqa: F811
    # TP1 on a 24 GB chip: 0.75 x 21525 MiB = 15.77 GiB < 16.33 GiB of weights, which fit the 19.65 GiB free and load.
    host(tmp_path, monkeypatch, "duo2_48g")
    assert refusal(serve_args("-tp", "1", "--gpu-memory-utilization", "0.75"), capsys) == (
        "ERROR ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine." + MORE)


def test_a_max_model_len_whose_request_the_kv_cache_cannot_hold_is_refused(root, monkeypatch, capsys):  # noqa: F811
    # TP1 at 65536 on a 96 GB chip: the mask takes 8 GiB, (32.0 - 16.33 - 2 - 8) / 2 = 2.84 GiB is left for the KV
    # cache, a 65536-token request needs 9 GiB; 2.84 GiB holds 161 blocks of 128 tokens.
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1")
    assert refusal(serve_args("-tp", "1", "--max-model-len", "65536", "--gpu-memory-utilization", "0.75"), capsys) == (
        "ERROR ValueError: To serve at least one request with the models's max seq len (65536), (9.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (2.84 GiB). Based on the available memory, the "
        "estimated maximum model length is 20608. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine." + MORE)


def test_weights_larger_than_the_chips_free_memory_run_it_out_of_memory(root, tmp_path, monkeypatch,  # noqa: F811
                                                                        capsys):
    # Twice the twin's weights on one 24 GB chip: 32.66 GiB against 19.65 GiB free. Layer by layer (929 MiB each),
    # 21 fit (19.05 GiB), the 22nd does not.
    folder = host(tmp_path, monkeypatch, "duo2_48g")
    index = folder / "data/models" / MODEL / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["metadata"]["total_size"] *= 2
    index.write_text(json.dumps(data))
    assert refusal(serve_args("-tp", "1", "--gpu-memory-utilization", "0.75"), capsys) == (
        "ERROR RuntimeError: NPU out of memory. Tried to allocate 929.00 MiB (NPU 0; 21.02 GiB total capacity; "
        "19.05 GiB already allocated; 19.05 GiB current active; 615.94 MiB free; 19.05 GiB reserved in total by "
        "PyTorch)" + OOM_HINT)


def test_a_utilization_above_the_chips_free_memory_is_refused_at_start(root, tmp_path, monkeypatch,  # noqa: F811
                                                                       capsys):
    # 0.95 x 21525 MiB = 19.97 GiB, of which 19.65 GiB (21525 - 1400 MB) is free.
    host(tmp_path, monkeypatch, "duo2_48g")
    assert refusal(serve_args("--gpu-memory-utilization", "0.95"), capsys) == (
        "ERROR ValueError: Free memory on device (19.65/21.02 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 19.97 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")


def test_main_checks_the_chips_it_opened_and_exits_1(root, tmp_path, monkeypatch, capsys):  # noqa: F811
    host(tmp_path, monkeypatch, "duo2_48g")
    monkeypatch.setattr(npu, "bind_cpus", lambda *args: [])  # this process's CPUs stay as they are
    args = ["serve", model_path(), "--max-model-len", "8192", "-tp", "1", "--dtype", "float16",
            "--gpu-memory-utilization", "0.75"]
    assert cli.main(args) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("ERROR ValueError: No available memory")
