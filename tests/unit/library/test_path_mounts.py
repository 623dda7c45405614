"""library/path_mounts.py: the node exporter's description of the fleet's paths, written whole and only on change.
df runs for real on this machine's own paths; module_utils/path_mounts.py's parts are held with a stand-in df."""
import os

from module_runs import assert_refused, run_module

from ansible_collections.ascend.fleet.plugins.module_utils import path_mounts


def describe(tmp_path, paths, check=False, **args):
    return run_module("path_mounts", paths=paths, dest=str(tmp_path / "ascend_fleet_paths.prom"),
                      _ansible_check_mode=check, **args)


def test_each_path_gets_the_mount_point_df_names_and_a_second_run_changes_nothing(tmp_path):
    (tmp_path / "models").mkdir()
    paths = {"model": str(tmp_path / "models"), "logs": "/", "cache": str(tmp_path / "not-here")}
    checked = describe(tmp_path, paths, check=True)
    assert checked["changed"] and not (tmp_path / "ascend_fleet_paths.prom").exists()
    result = describe(tmp_path, paths)
    mount = os.popen("df --output=target %s | tail -1" % tmp_path).read().strip()
    assert result["changed"] and result["mounts"] == {"model": mount, "logs": "/", "cache": None}, result
    text = (tmp_path / "ascend_fleet_paths.prom").read_text()
    assert text == path_mounts.HEADER + (
        'ascend_fleet_path_info{path="%s",use="model",mountpoint="%s"} 1\n'
        'ascend_fleet_path_info{path="/",use="logs",mountpoint="/"} 1\n' % (tmp_path / "models", mount))
    assert oct(os.stat(tmp_path / "ascend_fleet_paths.prom").st_mode & 0o777) == "0o644"
    assert result["diff"] == {"before": "", "after": text}
    again = describe(tmp_path, paths)
    assert not again["changed"], again
    assert sorted(os.listdir(tmp_path)) == ["ascend_fleet_paths.prom", "models"]


def test_the_text_is_what_the_template_wrote_before_so_an_upgrade_changes_nothing():
    """The lines roles/host_exporters rendered from df's output before this module (its template's text)."""
    mounts = {"model": "/data", "docker": "/"}
    assert path_mounts.render({"model": "/data/models/Qwen3-VL-8B-Instruct", "docker": "/var/lib/docker"}, mounts) == (
        "# Written by ascend.fleet.host_exporters: the file system (mount point) of each of the fleet's paths.\n"
        "# HELP ascend_fleet_path_info A path of the fleet (model, cache, Docker's data, logs) and the file system "
        "holding it\n# TYPE ascend_fleet_path_info gauge\n"
        'ascend_fleet_path_info{path="/data/models/Qwen3-VL-8B-Instruct",use="model",mountpoint="/data"} 1\n'
        'ascend_fleet_path_info{path="/var/lib/docker",use="docker",mountpoint="/"} 1\n')


def test_a_label_value_the_text_format_would_misread_is_escaped():
    text = path_mounts.render({"model": '/data/odd"name\\x'}, {"model": "/da\nta"})
    assert 'path="/data/odd\\"name\\\\x",use="model",mountpoint="/da\\nta"} 1\n' in text


def test_a_df_that_hangs_or_fails_gives_no_sample():
    assert path_mounts.mount_point("/nfs/models", 30, runner=lambda path, timeout: (None, "")) is None
    assert path_mounts.mount_point("/gone", 30, runner=lambda path, timeout: (1, "df: /gone: No such file\n")) is None
    assert path_mounts.mount_point("/data/m", 30, runner=lambda path, timeout: (0, "Mounted on\n/data\n")) == "/data"


def test_bad_options_are_refused_by_name(tmp_path):
    assert_refused(describe(tmp_path, {"model": "relative/path"}), "paths model='relative/path'",
                   "expected an absolute path")
    assert_refused(run_module("path_mounts", paths={"logs": "/"}, dest=str(tmp_path / "paths.txt")),
                   "dest", "ending in .prom")
    assert_refused(describe(tmp_path, {"logs": "/"}, mode="rw"), "mode 'rw'", "octal")
    assert not (tmp_path / "ascend_fleet_paths.prom").exists()


def test_a_folder_that_is_not_there_is_made_and_a_check_run_only_reports_it(tmp_path):
    dest = tmp_path / "prometheus/node-exporter/ascend_fleet_paths.prom"
    checked = run_module("path_mounts", paths={"logs": "/"}, dest=str(dest), _ansible_check_mode=True)
    assert checked["changed"] and not (tmp_path / "prometheus").exists(), checked
    result = run_module("path_mounts", paths={"logs": "/"}, dest=str(dest))
    assert result["changed"] and 'mountpoint="/"' in dest.read_text(), result
    assert oct(os.stat(dest.parent).st_mode & 0o777) == "0o755"
