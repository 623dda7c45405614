"""library/support_bundle.py: secrets scrubbed from every file, a bundle written whole or not at all, every npu-smi
call within one timeout."""
import os
import stat
import tarfile
import time

import pytest
from module_runs import run_module

from ansible_collections.ascend.fleet.plugins.modules import support_bundle
from twin import hosts

KEY = "sk-fleet-0123456789abcdef"


def test_the_env_files_secret_values_are_read(tmp_path):
    env = tmp_path / "vllm.env"
    env.write_text("VLLM_API_KEY=%s\nHF_TOKEN=hf_abc\nREGISTRY_PASSWORD=pw1\nVLLM_TWIN_SPEED=40\n" % KEY)
    assert support_bundle.env_secrets(str(env)) == [KEY, "hf_abc", "pw1"]
    assert support_bundle.env_secrets(str(tmp_path / "none.env")) == []


@pytest.mark.parametrize("text", [
    "plain %s in a log line" % KEY,
    "Authorization: Bearer other-token-123",
    "vllm serve /model --api-key other-key-456 --port 8000",
    "vllm serve /model --api-key=other-key-456",
    'HTTP Proxy: {"password": "hunter2"}',
    "export OPENAI_API_KEY=other-789",
    "hf_token: hf_secret",
])
def test_secrets_are_scrubbed(text):
    scrubbed = support_bundle.scrub(text.encode(), [KEY]).decode()
    assert support_bundle.SCRUBBED in scrubbed, scrubbed
    for secret in (KEY, "other-token-123", "other-key-456", "hunter2", "other-789", "hf_secret"):
        assert secret not in scrubbed, scrubbed


def test_what_is_no_secret_stays():
    text = "INFO 12-04 [api_server.py] vLLM API server version 0.18.0rc1; max_tokens=256; tokens/s 41.2\n"
    assert support_bundle.scrub(text.encode(), [KEY]).decode() == text


def test_a_key_in_binary_data_is_scrubbed_too():
    data = b"\x00\xff\xfe" + KEY.encode() + b"\x00"
    assert KEY.encode() not in support_bundle.scrub(data, [KEY])


def test_a_bundle_is_written_whole_root_only_and_scrubbed(tmp_path):
    bundle = support_bundle.Bundle()
    bundle.add("instances/a/log.txt", "started with --api-key %s\n" % KEY)
    bundle.add("npu-smi/info.txt", "+-----+\n")
    bundle.missing["msnpureport/"] = "not on this host"
    dest = tmp_path / "npu-a.tar.gz"
    bundle.write(str(dest), "npu-a", [KEY])
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        assert sorted(names) == ["npu-a/MANIFEST.json", "npu-a/instances/a/log.txt", "npu-a/npu-smi/info.txt"]
        for member in tar.getmembers():
            assert KEY.encode() not in tar.extractfile(member).read()
    assert os.listdir(tmp_path) == ["npu-a.tar.gz"]


def test_a_bundle_that_fails_midway_leaves_nothing(tmp_path, monkeypatch):
    bundle = support_bundle.Bundle()
    bundle.add("a.txt", "a")

    def broken(self, info, fileobj=None):
        raise OSError("disk full")

    monkeypatch.setattr(tarfile.TarFile, "addfile", broken)
    with pytest.raises(OSError):
        bundle.write(str(tmp_path / "npu-a.tar.gz"), "npu-a", [])
    assert os.listdir(tmp_path) == []


def test_a_command_that_cannot_run_is_named_in_the_manifest():
    bundle = support_bundle.Bundle()
    bundle.add_command("x.txt", ["/nonexistent/npu-smi", "info"])
    assert "x.txt" not in bundle.files and "cannot run" in bundle.missing["x.txt"]
    bundle.add_command("y.txt", ["sh", "-c", "echo partial; exit 3"])
    assert bundle.files["y.txt"] == b"partial\n" and "exit code 3" in bundle.missing["y.txt"]


def test_a_host_without_driver_or_plan_still_gets_a_bundle_saying_what_is_missing(tmp_path):
    """msnpureport writes its export into a folder of its working directory, named by the time: it is packed."""
    tool = tmp_path / "msnpureport"
    tool.write_text("#!/bin/sh\nmkdir -p 2026-12-04-14-00-00/slog/dev-os-0\n"
                    "echo 'device log line' > 2026-12-04-14-00-00/slog/dev-os-0/device-0.log\necho exported\n")
    tool.chmod(0o755)
    dest = tmp_path / "out" / "npu-x.tar.gz"
    dest.parent.mkdir()
    result = run_module("support_bundle", host="npu-x", dest=str(dest), plan_file=str(tmp_path / "plan.json"),
                        npu_smi=str(tmp_path / "npu-smi"), msnpureport=str(tool), docker="/nonexistent/docker",
                        diagnosis={"healthy": False, "summary": "npu-x: npu_smi_unusable: ..."})
    assert result["changed"] and result["size"] == dest.stat().st_size, result
    assert "msnpureport/2026-12-04-14-00-00/slog/dev-os-0/device-0.log" in result["members"]
    for missing in ("plan.json", "npu-smi/", "docker/ps.txt"):
        assert missing in result["missing"], result["missing"]
    with tarfile.open(dest) as tar:
        assert tar.extractfile("npu-x/doctor.json").read().startswith(b"{")
        assert tar.extractfile("npu-x/msnpureport/output.txt").read() == b"exported\n"
    assert sorted(path.name for path in dest.parent.iterdir()) == ["npu-x.tar.gz"]


def test_in_check_mode_nothing_is_written(tmp_path):
    dest = tmp_path / "npu-x.tar.gz"
    result = run_module("support_bundle", host="npu-x", dest=str(dest), plan_file=str(tmp_path / "plan.json"),
                        npu_smi=str(tmp_path / "npu-smi"), _ansible_check_mode=True)
    assert not result["changed"] and result["size"] == 0 and not dest.exists(), result


def test_every_npu_smi_call_shares_the_timeout(tmp_path):
    """The NPU facts' calls and the outputs packed: each but `npu-smi info` a second late, well within a per-call
    timeout, thirty-odd of them on a four-card host past a whole one. What the time did not reach is named in the
    manifest."""
    root = tmp_path / "host"
    hosts.build_root(root, hosts.load_profiles()["seed_duo4"])
    slow = tmp_path / "slow-npu-smi"
    slow.write_text("#!/bin/sh\n[ \"$*\" = info ] || sleep 1\nexec %s \"$@\"\n" % (root / "usr/local/bin/npu-smi"))
    slow.chmod(0o755)
    started = time.monotonic()
    result = run_module("support_bundle", host="npu-x", dest=str(tmp_path / "npu-x.tar.gz"),
                        plan_file=str(tmp_path / "plan.json"), npu_smi=str(slow), timeout=3,
                        msnpureport=str(tmp_path / "none"), docker="/nonexistent/docker", _ansible_check_mode=True)
    elapsed = time.monotonic() - started
    assert elapsed < 9, "the bundle took %.1f s with timeout 3" % elapsed
    # The NPU facts, read first, took the time: no output was packed after them.
    for name in ("npu-smi/info.txt", "npu-smi/topo.txt"):
        assert "not run: timeout (3s, all npu-smi calls together) had run out" in result["missing"][name], result
