"""The command (ascend_vllm_fleet/cli.py) without a fleet: ansible-runner replaced by one that replays the events
a run emits (the command on the twin: tests/integration/test_cli.py)."""
import io
import json

import pytest
from bench_events import BENCH_EVENTS, A, B

from ascend_vllm_fleet import cli


def test_bench_plan_runs_the_playbook_in_check_mode_and_prints_the_plan(tmp_path, monkeypatch):
    seen = {}

    class Run:
        rc = 0
        stats = {"ok": {A: 5, B: 5}, "changed": {}}

        class config:
            ident = "20261130T000000Z-bench"

    def fake_run(**settings):
        seen.update(settings)
        for event in BENCH_EVENTS:
            settings["event_handler"](event)
        return Run

    import ansible_runner

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    out = io.StringIO()
    args = cli.build_parser().parse_args(["bench", "--plan", "-i", str(inventory), "-e",
                                          "vllm_bench_reports_dir=%s" % tmp_path])
    extravars, report_dir = cli.playbook_vars(args)
    assert cli.run_playbook(args, cli.PLAYBOOKS["bench"], extravars, out=out, report_dir=report_dir) == 0
    assert "--check" in seen["cmdline"].split()
    assert out.getvalue().count("benchmark plan") == 1 and "longest: npu-a, estimated 39s" in out.getvalue()
    args = cli.build_parser().parse_args(["bench", "-i", str(inventory)])
    assert not args.plan


def test_images_passes_its_action_archive_and_options_to_the_play_and_prints_the_list(tmp_path, monkeypatch):
    """`images save ARCHIVE --pull-mirror M` runs playbooks/images.yml with the archive's absolute path and the
    mirror, and prints the list the play wrote; `load --hosts` loads onto the hosts."""
    import ansible_runner

    seen = {}

    class Run:
        rc = 0
        stats = {"ok": {"npu-a": 3}, "changed": {}}

        class config:
            ident = "20261205T000000Z-images"

    def fake_run(**settings):
        arguments = settings["cmdline"].split()
        with open(arguments[arguments.index("-e") + 1][1:], encoding="utf-8") as handle:
            seen.update(json.load(handle))
        with open(seen["vllm_image_archive_list_file"], "w", encoding="utf-8") as handle:
            json.dump([{"name": "quay.io/ascend/vllm-ascend:v0.19.1rc1-310p", "platform": "linux/arm64",
                               "release": "v0.19.1rc1, CANN 8.5.1, eager mode", "hosts": ["npu-a", "npu-b"]}], handle)
        (tmp_path / "carry.tar").write_bytes(b"x" * 10)
        return Run

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.chdir(tmp_path)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    out = io.StringIO()
    args = cli.build_parser().parse_args(["images", "save", "carry.tar", "-i", str(inventory), "--pull-mirror",
                                          "quay.nju.edu.cn"])
    extravars, _report_dir = cli.playbook_vars(args)
    assert cli.command_images(args, extravars, out=out) == 0
    assert seen["vllm_image_archive_action"] == "save" and seen["vllm_image_archive_path"] == str(
        tmp_path / "carry.tar") and seen["vllm_image_archive_pull_mirror"] == "quay.nju.edu.cn"
    printed = out.getvalue()
    assert "quay.io/ascend/vllm-ascend:v0.19.1rc1-310p  linux/arm64  v0.19.1rc1, CANN 8.5.1, eager mode  npu-a, " \
           "npu-b" in printed, printed
    assert "archive: %s (10 bytes;" % (tmp_path / "carry.tar") in printed
    args = cli.build_parser().parse_args(["images", "load", "carry.tar", "--hosts", "-i", str(inventory)])
    assert cli.playbook_vars(args)[0]["vllm_image_archive_load_into"] == "hosts"


@pytest.mark.parametrize("argv, expected", [
    (["images", "save"], "ascend-vllm-fleet images save: the archive's path is missing. Fix: ascend-vllm-fleet "
                         "images save ARCHIVE"),
    (["images", "list", "a.tar"], "ascend-vllm-fleet images list: a.tar: list takes no archive"),
    (["images", "save", "a.tar", "--hosts"], "ascend-vllm-fleet images save: --hosts: not used here"),
    (["images", "load", "a.tar", "--hosts", "--registry", "r:5000"], "images load: --registry: not used here"),
    (["images", "load", "a.tar", "--pull-mirror", "m"], "images load: --pull-mirror: not used here"),
])
def test_images_refuses_what_its_action_does_not_take(argv, expected, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    with pytest.raises(SystemExit) as refused:
        cli.playbook_vars(cli.build_parser().parse_args(argv + ["-i", str(inventory)]))
    assert expected in str(refused.value), str(refused.value)


def verify_event(kind, host, result):
    """The result of the verification's module on a host, as ansible-runner hands it to the command."""
    return {"event": kind, "event_data": {"host": host, "task": "Check the host and each instance against the plan "
                                          "its deploy recorded", "task_action": "ascend.fleet.fleet_verify",
                                          "resolved_action": "ascend.fleet.fleet_verify", "res": result}}


def test_verify_runs_its_playbook_and_prints_each_hosts_verdict(tmp_path, monkeypatch):
    """A table row per host whose reason is its verdict's summary, then each host's summary with every failure on a
    line of its own, the failures whole; exit 1 when a host failed."""
    import ansible_runner

    failure = ("npu-b, instance vllm-ascend: restart policy no, expected unless-stopped. Fix: `docker update "
               "--restart unless-stopped vllm-ascend`; or, when the deploy set another policy, deploy with "
               "vllm_server_restart_policy: unless-stopped")
    events = [
        verify_event("runner_on_ok", "npu-a", {"verified": True, "checks": 22, "failures": [],
                                               "summary": "npu-a: verified: 1 instance(s), 22 checks passed"}),
        verify_event("runner_on_failed", "npu-b", {"verified": False, "checks": 22, "msg": "...",
                                                   "failures": [{"check": "restart_policy", "message": failure}],
                                                   "summary": "npu-b: 1 of 22 checks failed"}),
        {"event": "runner_on_unreachable", "event_data": {"host": "npu-c", "res": {"msg": "ssh: connect refused"}}}]
    seen = {}

    class Run:
        rc = 2
        stats = {"ok": {"npu-a": 2, "npu-b": 1}, "failures": {"npu-b": 1}, "dark": {"npu-c": 1}, "changed": {}}

        class config:
            ident = "20261206T000000Z-verify"

    def fake_run(**settings):
        seen.update(settings)
        for event in events:
            settings["event_handler"](event)
        return Run

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    out = io.StringIO()
    args = cli.build_parser().parse_args(["verify", "-i", str(inventory), "-l", "npu-*"])
    extravars, _report_dir = cli.playbook_vars(args)
    assert cli.run_playbook(args, cli.PLAYBOOKS["verify"], extravars, out=out) == 1
    assert seen["playbook"] == str(cli.REPO / "playbooks" / "verify.yml") and "--limit npu-*" in seen["cmdline"]
    # The table, the verdicts, then where the artifacts are.
    table, verdicts = out.getvalue().strip("\n").split("\n\n")[-3:-1]
    assert [line.split(None, 3) for line in table.splitlines()[1:]] == [
        ["npu-a", "ok", "0"], ["npu-b", "FAILED", "0", "npu-b: 1 of 22 checks failed"],
        ["npu-c", "UNREACHABLE", "0", "unreachable: ssh: connect refused"]]
    assert verdicts.splitlines() == ["npu-a: verified: 1 instance(s), 22 checks passed",
                                     "npu-b: 1 of 22 checks failed", "  " + failure]
