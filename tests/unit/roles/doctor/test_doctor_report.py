"""plugins/filter/doctor.py and the doctor command: the fleet's diagnosis from each host's result, a host the
doctor did not read named as such, and the command's exit code (the command on the twin:
tests/integration/test_failure_modes.py)."""
import io
import json

from ansible_collections.ascend.fleet.plugins.filter.doctor import doctor_report
from ansible_collections.ascend.fleet.plugins.module_utils.diagnosis import diagnose, summary_line
from ascend_vllm_fleet import cli

HEALTHY = {"healthy": True, "findings": [], "summary": "npu-a: healthy", "plan_problem": None}
CRASHED = {"healthy": False, "summary": "npu-b: [vllm-ascend] large_image_crash: ...",
           "findings": [{"rule": "large_image_crash", "instance": "vllm-ascend"}], "plan_problem": None}


def test_the_fleets_diagnosis_names_every_host():
    hostvars = {"npu-a": {"doctor_result": HEALTHY, "doctor_packed": {"dest": "/tmp/x/npu-a.tar.gz", "size": 2048,
                                                                      "missing": {}}},
                "npu-b": {"doctor_result": CRASHED},
                "npu-c": {"doctor_result": {"failed": True, "msg": "docker 'docker' cannot run"}},
                "npu-d": {}}
    report = doctor_report(["npu-a", "npu-b", "npu-c", "npu-d"], hostvars)
    assert not report["healthy"]
    assert [row["state"] for row in report["hosts"]] == ["healthy", "unhealthy", "not_diagnosed", "not_diagnosed"]
    assert report["hosts"][0]["bundle"] == {"file": "bundles/npu-a.tar.gz", "size": 2048, "missing": {}}
    assert report["hosts"][1]["bundle"] is None and report["hosts"][1]["findings"] == CRASHED["findings"]
    assert report["hosts"][2]["summary"] == "npu-c: not diagnosed: docker 'docker' cannot run"
    assert "unreachable" in report["hosts"][3]["summary"]
    assert doctor_report(["npu-a"], hostvars)["healthy"]


def run_doctor(tmp_path, monkeypatch, fleet, argv, rc=0):
    seen = {}

    class Run:
        stats = {"ok": {"npu-a": 3}, "changed": {}}

        class config:
            ident = "20261204T000000Z-doctor"

    Run.rc = rc

    def fake_run(**settings):
        seen["extravars"] = json.loads(open(settings["cmdline"].split("@")[-1]).read())
        folder = tmp_path / "diagnosis"
        folder.mkdir(exist_ok=True)
        if fleet is not None:
            (folder / "doctor.json").write_text(json.dumps(fleet))
        return Run

    import ansible_runner

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    out = io.StringIO()
    args = cli.build_parser().parse_args(argv + ["-i", str(inventory), "-e",
                                                 "doctor_report_dir=%s" % (tmp_path / "diagnosis")])
    extravars, report_dir = cli.playbook_vars(args)
    code = cli.command_doctor(args, extravars, report_dir, out)
    return code, out.getvalue(), seen["extravars"]


def test_the_doctor_command_prints_a_line_per_host_and_exits_1_when_one_is_not_healthy(tmp_path, monkeypatch):
    fleet = doctor_report(["npu-a", "npu-b"], {"npu-a": {"doctor_result": HEALTHY},
                                               "npu-b": {"doctor_result": CRASHED}})
    code, out, extravars = run_doctor(tmp_path, monkeypatch, fleet, ["doctor"])
    assert code == 1 and "npu-a: healthy\nnpu-b: [vllm-ascend] large_image_crash" in out, out
    assert extravars["doctor_bundle"] is False
    fleet = doctor_report(["npu-a"], {"npu-a": {"doctor_result": HEALTHY}})
    code, out, extravars = run_doctor(tmp_path, monkeypatch, fleet, ["collect"])
    assert code == 0 and extravars["doctor_bundle"] is True, out
    code, out, extravars = run_doctor(tmp_path, monkeypatch, fleet, ["doctor", "--bundle"])
    assert extravars["doctor_bundle"] is True


def test_a_run_that_wrote_no_diagnosis_fails_and_says_so(tmp_path, monkeypatch):
    code, out, _extravars = run_doctor(tmp_path, monkeypatch, None, ["doctor"], rc=2)
    assert code != 0 and "no diagnosis was written" in out, out


def restarted_host(host, log_since):
    """The doctor's result for a host whose engine died before Docker restarted its container 19 minutes ago,
    which serves (log_since: its lines since that start), as fleet_doctor returns it."""
    instance = {"name": "vllm-ascend", "log": [
        "2026-12-04T13:16:20.512345678Z ERROR VLLM Engine failed, terminating server"] + log_since,
        "container": {"status": "running", "running": True, "restart_count": 1, "exit_code": 1, "oom_killed": False,
                      "started_at": "2026-12-04T13:16:31.25Z", "started_s_ago": 1140},
        "health": {"status": 200}, "models": {"status": 200}, "answers": None}
    found = diagnose({"npu": {}, "instances": [instance]}, {"disk_full_share": 0.9, "restart_window_s": 3600})
    return dict(found, summary=summary_line(host, found), plan_problem=None)


def test_the_doctor_command_exits_0_for_warnings_only_and_1_for_an_engine_dying_since_the_start(tmp_path,
                                                                                                 monkeypatch):
    healthy = restarted_host("npu-a", ["2026-12-04T13:16:33.000000000Z INFO:     Started server process [1]"])
    fleet = doctor_report(["npu-a"], {"npu-a": {"doctor_result": healthy}})
    code, out, _extravars = run_doctor(tmp_path, monkeypatch, fleet, ["doctor"])
    assert code == 0 and "npu-a: healthy | warning: [vllm-ascend] engine_dead: " in out, out
    dying = restarted_host("npu-a", ["2026-12-04T13:40:00.000000000Z ERROR VLLM Engine failed, terminating server"])
    fleet = doctor_report(["npu-a"], {"npu-a": {"doctor_result": dying}})
    code, out, _extravars = run_doctor(tmp_path, monkeypatch, fleet, ["doctor"])
    assert code == 1 and "npu-a: [vllm-ascend] engine_dead: " in out, out
