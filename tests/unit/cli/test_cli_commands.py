"""The command (ascend_vllm_fleet/cli.py) without a fleet: ansible-runner replaced by one that replays the events
a run emits (the command on the twin: tests/integration/test_cli.py)."""
import io

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
