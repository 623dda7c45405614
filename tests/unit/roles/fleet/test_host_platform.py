"""plugins/filter/fleet.py host_platform: a host's operating system as the roles need it, decided in one place. The
facts are those ansible-core 2.19 reports for each distribution (the twin's openEuler, UOS and Debian hosts show
them: tests/integration/test_gateway_fleet.py; Kylin's, where no module runs, are its fixtures' and dnf, which
Kylin V10 has), the os-release texts the distributions' own."""
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.filter.fleet import host_platform, platform_vars_file
from conftest import REPO

DISTRIBUTIONS = yaml.safe_load((REPO / "tests/twin/distributions.yml").read_text())
DEBIAN_OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n'
# UOS Desktop is Debian underneath: no PLATFORM_ID.
UOS_DESKTOP = 'PRETTY_NAME="UOS Desktop 20"\nNAME="uos"\nVERSION_ID="20"\nID=uos\n'


def facts(distribution, version, family, pkg_mgr):
    return {"distribution": distribution, "distribution_version": version, "os_family": family, "pkg_mgr": pkg_mgr}


@pytest.mark.parametrize("reported,os_release,family,manager,files", [
    (facts("openEuler", "22.03", "RedHat", "dnf"), DISTRIBUTIONS["openeuler"]["files"]["/etc/os-release"],
     "RedHat", "dnf", ["openeuler-22.03.yml", "openeuler.yml", "redhat.yml"]),
    # As ansible-core reports UOS Server 20 1070e (os_family Debian, pkg_mgr apt, though it has no apt): an RPM host.
    (facts("Uos", "20", "Debian", "apt"), DISTRIBUTIONS["uos"]["files"]["/etc/os-release"],
     "RedHat", "dnf", ["uos-20.yml", "uos.yml", "redhat.yml"]),
    (facts("Uos", "20", "Debian", "apt"), UOS_DESKTOP, "Debian", "apt", ["uos-20.yml", "uos.yml", "debian.yml"]),
    (facts("Debian", "12.11", "Debian", "apt"), DEBIAN_OS_RELEASE, "Debian", "apt", ["debian-12.11.yml",
                                                                                      "debian.yml"]),
    (facts("Kylin Linux Advanced Server", "V10", "RedHat", "dnf"), DISTRIBUTIONS["kylin"]["files"]["/etc/os-release"],
     "RedHat", "dnf", ["kylin_linux_advanced_server-v10.yml", "kylin_linux_advanced_server.yml", "redhat.yml"]),
])
def test_each_distribution_is_the_family_it_installs_packages_of(reported, os_release, family, manager, files):
    platform = host_platform(reported, os_release)
    assert (platform["family"], platform["package_manager"], platform["vars_files"]) == (family, manager, files)
    assert platform["reported_family"] == reported["os_family"]
    assert platform["label"] == "%s %s" % (reported["distribution"], reported["distribution_version"])


def test_a_family_reported_with_another_familys_package_manager_gets_its_own():
    platform = host_platform(facts("openEuler", "22.03", "RedHat", "apt"))
    assert (platform["family"], platform["package_manager"]) == ("RedHat", "dnf")


def test_a_host_without_an_os_release_is_what_ansible_reports():
    platform = host_platform(facts("Ubuntu", "22.04", "Debian", "apt"))
    assert (platform["family"], platform["package_manager"]) == ("Debian", "apt")


def test_a_family_the_roles_have_no_settings_for_keeps_what_ansible_reports():
    platform = host_platform(facts("SLES", "15.5", "Suse", "zypper"), 'ID="sles"\n')
    assert (platform["family"], platform["package_manager"], platform["vars_files"][-1]) == (
        "Suse", "zypper", "suse.yml")


def test_each_family_asks_its_own_package_database_and_another_family_none():
    assert host_platform(facts("openEuler", "22.03", "RedHat", "dnf"))["package_query"][:3] == [
        "rpm", "--query", "--whatprovides"]
    # UOS Server as ansible-core reports it (Debian, apt): an RPM host, whose database rpm asks.
    assert host_platform(facts("Uos", "20", "Debian", "apt"), DISTRIBUTIONS["uos"]["files"]["/etc/os-release"])[
        "package_query"][0] == "rpm"
    assert host_platform(facts("Debian", "12.11", "Debian", "apt"))["package_query"][0] == "dpkg-query"
    assert host_platform(facts("SLES", "15.5", "Suse", "zypper"), 'ID="sles"\n')["package_query"] == []


DPKG_QUERY = host_platform(facts("Debian", "12.11", "Debian", "apt"))["package_query"]


@pytest.mark.parametrize("names,all_installed", [
    (["dpkg", "bash"], True),
    (["dpkg", "no-such-package-of-any-distribution"], False),
    # A version, as apt takes it, is no name the database knows: the package manager decides.
    (["dpkg=1.0"], False),
])
def test_the_debian_query_says_installed_once_per_installed_package_and_otherwise_not(names, all_installed):
    """The query of roles/fleet/tasks/packages.yml, asked of this machine's dpkg database (the suite runs on Debian or
    Ubuntu): the task skips the package manager only where the query exits 0 and every line says installed."""
    answer = subprocess.run(DPKG_QUERY + names, capture_output=True, text=True)
    lines = answer.stdout.splitlines()
    assert (answer.returncode == 0 and sorted(set(lines)) == ["installed"]) == all_installed, (answer, lines)
    if all_installed:
        assert len(lines) >= len(names)


@pytest.mark.parametrize("role", ["ascend_driver", "docker_runtime", "host_exporters", "monitoring"])
def test_every_role_that_installs_packages_has_settings_for_both_families(role):
    folder = REPO / "roles" / role / "vars"
    for family in ("debian", "redhat"):
        settings = yaml.safe_load((folder / ("%s.yml" % family)).read_text())
        assert settings and all(str(key).startswith(role) for key in settings), settings


def test_a_roles_vars_file_is_the_most_specific_it_has(tmp_path):
    platform = host_platform(facts("openEuler", "22.03", "RedHat", "dnf"),
                             DISTRIBUTIONS["openeuler"]["files"]["/etc/os-release"])
    (tmp_path / "redhat.yml").write_text("{}")
    assert platform_vars_file(platform, "host_exporters", str(tmp_path), "npu-01") == str(tmp_path / "redhat.yml")
    (tmp_path / "openeuler.yml").write_text("{}")
    assert platform_vars_file(platform, "host_exporters", str(tmp_path), "npu-01") == str(tmp_path / "openeuler.yml")


def test_a_host_the_role_has_no_settings_for_is_refused_by_name(tmp_path):
    (tmp_path / "debian.yml").write_text("{}")
    platform = host_platform(facts("SLES", "15.5", "Suse", "zypper"), 'ID="sles"\n')
    with pytest.raises(AnsibleFilterError) as refused:
        platform_vars_file(platform, "gateway", str(tmp_path), "npu-07")
    assert str(refused.value).startswith("gateway on npu-07: found SLES 15.5 (Suse family); required one of the "
                                         "distributions the role knows the packages of"), refused.value
    assert "Fix: install the packages yourself" in str(refused.value)


@pytest.mark.parametrize("distribution", sorted(name for name in DISTRIBUTIONS
                                                if "/etc/os-release" in DISTRIBUTIONS[name].get("files", {})))
def test_the_python_probes_platform_line_decides_as_the_whole_os_release_does(tmp_path, distribution):
    """Preflight decides the platform from its Python probe's output (roles/ascend_preflight/tasks/python.yml), not
    from a second read of os-release: the probe's lines, run on each distribution's os-release, decide alike."""
    os_release = DISTRIBUTIONS[distribution]["files"]["/etc/os-release"]
    (tmp_path / "os-release").write_text(os_release)
    (task,) = [task for task in yaml.safe_load((REPO / "roles/ascend_preflight/tasks/python.yml").read_text())
               if "ansible.builtin.raw" in task]
    os_lines = "\n".join(task["ansible.builtin.raw"].splitlines()[:2]).replace("/etc/os-release",
                                                                               str(tmp_path / "os-release"))
    assert "PLATFORM_ID" in os_lines
    probe = subprocess.run(["sh", "-c", os_lines], capture_output=True, text=True, check=True).stdout
    reported = facts("Uos", "20", "Debian", "apt")
    assert host_platform(reported, probe) == host_platform(reported, os_release)
