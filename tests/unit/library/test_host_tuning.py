"""library/host_tuning.py over a kernel's files laid out in a folder (cpufreq policies, /proc/sys, debugfs): what
differs is reported, applied only when asked, kept for the next boot in sysctl.d and tmpfiles.d, and a second
apply changes nothing; a setting the host lacks is reported with why, never an error."""
import pytest
from module_runs import assert_refused, run_module

GUIDE = {"vm.swappiness": 0, "kernel.numa_balancing": 0, "kernel.sched_migration_cost_ns": 50000}


@pytest.fixture
def kernel(tmp_path):
    """A host like a Kunpeng with a 6.x kernel: two policies on schedutil, the scheduler's setting in debugfs."""
    root = tmp_path / "kernel"
    for number in (0, 1):
        policy = root / ("cpufreq/policy%d" % number)
        policy.mkdir(parents=True)
        (policy / "scaling_governor").write_text("schedutil\n")
        (policy / "scaling_available_governors").write_text("ondemand performance schedutil\n")
    (root / "sys/vm").mkdir(parents=True)
    (root / "sys/vm/swappiness").write_text("60\n")
    (root / "sys/kernel").mkdir(parents=True)
    (root / "sys/kernel/numa_balancing").write_text("1\n")
    (root / "debug/sched").mkdir(parents=True)
    (root / "debug/sched/migration_cost_ns").write_text("500000\n")
    return root


def tune(kernel, **args):
    where = ("module.POLICIES = %r\nmodule.SYSCTL_ROOT = %r\nmodule.DEBUG_SCHED = %r"
             % (str(kernel / "cpufreq"), str(kernel / "sys"), str(kernel / "debug/sched")))
    args.setdefault("sysctl_file", str(kernel / "etc/sysctl.d/90-ascend-fleet.conf"))
    args.setdefault("tmpfiles_file", str(kernel / "etc/tmpfiles.d/ascend-fleet.conf"))
    return run_module("host_tuning", prepare=where, **args)


def by_name(result):
    return {setting["name"]: setting for setting in result["settings"]}


def test_what_differs_is_reported_and_nothing_is_written(kernel):
    result = tune(kernel, sysctls=GUIDE)
    assert not result["changed"] and result["unavailable"] == []
    assert result["differs"] == ["cpu_governor", "vm.swappiness", "kernel.numa_balancing",
                                 "kernel.sched_migration_cost_ns"]
    settings = by_name(result)
    assert (settings["cpu_governor"]["current"], settings["vm.swappiness"]["current"]) == ("schedutil", "60")
    assert settings["kernel.sched_migration_cost_ns"]["where"] == str(kernel / "debug/sched/migration_cost_ns")
    assert (kernel / "sys/vm/swappiness").read_text() == "60\n" and not (kernel / "etc").exists()


def test_apply_sets_it_keeps_it_for_the_next_boot_and_a_second_apply_changes_nothing(kernel):
    first = tune(kernel, sysctls=GUIDE, apply=True)
    assert first["changed"] and first["differs"] == [], first
    assert {s["name"]: (s["before"], s["current"]) for s in first["settings"]}["vm.swappiness"] == ("60", "0")
    assert (kernel / "cpufreq/policy1/scaling_governor").read_text() == "performance\n"
    assert (kernel / "debug/sched/migration_cost_ns").read_text() == "50000\n"
    sysctl = (kernel / "etc/sysctl.d/90-ascend-fleet.conf").read_text()
    assert "vm.swappiness = 0\nkernel.numa_balancing = 0\n" in sysctl
    assert "sched_migration_cost_ns" not in sysctl, "a 6.x kernel has no such sysctl: systemd-sysctl would fail on it"
    tmpfiles = (kernel / "etc/tmpfiles.d/ascend-fleet.conf").read_text()
    assert "w %s/policy*/scaling_governor - - - - performance\n" % (kernel / "cpufreq") in tmpfiles
    assert "w %s - - - - 50000\n" % (kernel / "debug/sched/migration_cost_ns") in tmpfiles
    again = tune(kernel, sysctls=GUIDE, apply=True)
    assert not again["changed"] and again["differs"] == []


def test_check_mode_says_what_apply_would_change(kernel):
    result = tune(kernel, sysctls=GUIDE, apply=True, _ansible_check_mode=True)
    assert result["changed"] and "vm.swappiness" in result["differs"]
    assert (kernel / "sys/vm/swappiness").read_text() == "60\n" and not (kernel / "etc").exists()


def test_an_older_kernel_keeps_the_scheduler_setting_as_a_sysctl(kernel):
    (kernel / "sys/kernel/sched_migration_cost_ns").write_text("500000\n")
    result = tune(kernel, sysctls=GUIDE, apply=True)
    assert by_name(result)["kernel.sched_migration_cost_ns"]["where"] == str(
        kernel / "sys/kernel/sched_migration_cost_ns")
    assert "kernel.sched_migration_cost_ns = 50000" in (kernel / "etc/sysctl.d/90-ascend-fleet.conf").read_text()


def test_what_the_host_lacks_is_unavailable_with_why(kernel):
    for policy in (kernel / "cpufreq").iterdir():
        for item in policy.iterdir():
            item.unlink()
        policy.rmdir()
    for item in (kernel / "debug/sched").iterdir():
        item.unlink()
    (kernel / "debug/sched").rmdir()
    result = tune(kernel, sysctls=dict(GUIDE, **{"vm.no_such_setting": 1}), apply=True)
    assert not result.get("failed"), result
    assert result["unavailable"] == ["cpu_governor", "kernel.sched_migration_cost_ns", "vm.no_such_setting"]
    settings = by_name(result)
    assert "no cpufreq policy" in settings["cpu_governor"]["why"]
    assert "debugfs" in settings["kernel.sched_migration_cost_ns"]["why"]
    assert "no_such_setting" not in (kernel / "etc/sysctl.d/90-ascend-fleet.conf").read_text()


def test_a_governor_the_driver_does_not_offer_is_unavailable(kernel):
    settings = by_name(tune(kernel, governor="turbo"))
    assert settings["cpu_governor"]["state"] == "unavailable"
    assert "offers ondemand, performance, schedutil, not turbo" in settings["cpu_governor"]["why"]


def test_mixed_governors_are_listed_by_policy(kernel):
    (kernel / "cpufreq/policy1/scaling_governor").write_text("performance\n")
    assert by_name(tune(kernel))["cpu_governor"]["current"] == "performance (policy1), schedutil (policy0)"


@pytest.mark.parametrize("args, expected", [
    ({"sysctls": {"VM.Swap": 1}}, "expected a sysctl name such as vm.swappiness"),
    ({"sysctls": {"vm.swappiness": "0\nkernel.x = 1"}}, "expected one value"),
    ({"sysctls": {"vm.swappiness": None}}, "expected one value"),
    ({"governor": "perf ormance"}, "expected a cpufreq governor name"),
])
def test_settings_it_cannot_use_are_refused(kernel, args, expected):
    assert_refused(tune(kernel, **args), expected)


def test_a_policy_the_kernel_will_not_read_is_left_out(kernel):
    # A policy whose CPUs are all offline answers EBUSY; here a folder where its file should be stands for it.
    (kernel / "cpufreq/policy1/scaling_governor").unlink()
    (kernel / "cpufreq/policy1/scaling_governor").mkdir()
    result = tune(kernel, apply=True)
    assert not result.get("failed") and result["differs"] == [], result
    assert (kernel / "cpufreq/policy0/scaling_governor").read_text() == "performance\n"


def test_a_value_the_kernel_refuses_is_not_kept_and_a_second_run_changes_nothing(kernel):
    # The kernel answers EINVAL to a value out of its range; the files here take anything, so the write is made
    # to answer as the kernel does.
    refuse = ("import errno\nwritten = module.write\n"
              "def write(path, value):\n"
              "    if path.endswith('swappiness'):\n"
              "        raise OSError(errno.EINVAL, 'Invalid argument')\n"
              "    written(path, value)\n"
              "module.write = write")
    where = ("module.POLICIES = %r\nmodule.SYSCTL_ROOT = %r\nmodule.DEBUG_SCHED = %r\n"
             % (str(kernel / "cpufreq"), str(kernel / "sys"), str(kernel / "debug/sched")))
    args = dict(sysctls={"vm.swappiness": 0, "kernel.numa_balancing": 0}, apply=True,
                sysctl_file=str(kernel / "etc/sysctl.d/90-ascend-fleet.conf"),
                tmpfiles_file=str(kernel / "etc/tmpfiles.d/ascend-fleet.conf"))
    result = run_module("host_tuning", prepare=where + refuse, **args)
    again = run_module("host_tuning", prepare=where + refuse, **args)
    swappiness = by_name(result)["vm.swappiness"]
    assert swappiness["state"] == "refused" and "Invalid argument" in swappiness["why"], swappiness
    assert result["differs"] == ["vm.swappiness"], "the governor was set; only the refused value still differs"
    assert "vm.swappiness" not in (kernel / "etc/sysctl.d/90-ascend-fleet.conf").read_text()
    assert "kernel.numa_balancing = 0" in (kernel / "etc/sysctl.d/90-ascend-fleet.conf").read_text()
    assert not again["changed"], again


def test_a_boot_file_that_cannot_be_written_is_named(kernel):
    (kernel / "etc").mkdir()
    (kernel / "etc/sysctl.d").write_text("a file where the folder goes")
    assert_refused(tune(kernel, sysctls=GUIDE, apply=True), "could not write %s" % (
        kernel / "etc/sysctl.d/90-ascend-fleet.conf"), "become")
