"""tests/twin/rpm_packages.py, the pieces that decide what an RPM of the twin holds: its version from the Debian
package's, and its spec (owners made before the files, config files kept, only its own folders). The whole
conversion runs when the twin builds its RPM root (the gateway fleet's hosts install from it)."""
import stat

import pytest
import yaml

from conftest import REPO
from twin import rpm_packages


@pytest.mark.parametrize("debian,rpm", [
    ("20.10.24+dfsg1-1+deb12u1+b6", "20.10.24.dfsg1"),
    ("1:2.6.12-1+deb12u3", "2.6.12"),
    ("2.42.0+ds-5+deb12u1", "2.42.0.ds"),
    ("1.6.20~ds1-1+deb12u3", "1.6.20.ds1"),
])
def test_the_version_is_the_upstream_one_in_rpms_alphabet(debian, rpm):
    assert rpm_packages.rpm_version(debian) == rpm


def test_renames_reach_paths_and_link_targets():
    renames = rpm_packages.RPM_PACKAGES["node_exporter"]["rename"]
    assert rpm_packages.renamed("/usr/bin/prometheus-node-exporter", renames) == "/usr/bin/node_exporter"
    assert rpm_packages.renamed("/etc/default/prometheus-node-exporter", renames) == "/etc/default/node_exporter"


def test_the_spec_makes_the_owners_first_keeps_config_and_lists_only_its_own_folders():
    entries = [("/etc/haproxy", stat.S_IFDIR | 0o755, "root", "root"),
               ("/etc/haproxy/haproxy.cfg", stat.S_IFREG | 0o644, "root", "root"),
               ("/usr/sbin/haproxy", stat.S_IFREG | 0o755, "root", "root"),
               ("/usr/sbin", stat.S_IFDIR | 0o755, "root", "root"),
               ("/var/lib/haproxy", stat.S_IFDIR | 0o750, "haproxy", "haproxy"),
               ("/usr/sbin/haproxy-link", stat.S_IFLNK | 0o777, "root", "root")]
    text = rpm_packages.spec_text("haproxy", rpm_packages.RPM_PACKAGES["haproxy"], entries,
                                  {("root", "root"), ("haproxy", "haproxy")}, "2.6.12", "/stage", {"/usr/sbin"})
    lines = text.splitlines()
    pre, files = lines.index("%pre"), lines.index("%files")
    assert "getent passwd haproxy >/dev/null || useradd --system" in "\n".join(lines[pre:files])
    assert lines[files + 1:] == ['%attr(0755,root,root) %dir "/etc/haproxy"',
                                 '%attr(0644,root,root) %config(noreplace) "/etc/haproxy/haproxy.cfg"',
                                 '%attr(0755,root,root) "/usr/sbin/haproxy"',
                                 '%attr(0750,haproxy,haproxy) %dir "/var/lib/haproxy"',
                                 '"/usr/sbin/haproxy-link"']


def test_every_package_a_deploy_installs_on_an_rpm_host_is_made():
    """What site.yml installs (ascend_driver's build dependencies, of the driver playbook, come from the distribution's
    own repository, which the twin's does not stand for: its driver tests run on Debian hosts)."""
    wanted = set()
    for role, key in (("docker_runtime", "docker_runtime_distribution_packages"),
                      ("host_exporters", "host_exporters_node_distribution"),
                      ("monitoring", "monitoring_distribution")):
        value = yaml.safe_load((REPO / "roles" / role / "vars" / "redhat.yml").read_text())[key]
        wanted |= set(value if isinstance(value, list) else value.get("packages", [value.get("package")]))
    wanted.add("haproxy")  # the gateway role's, the same name everywhere
    assert wanted <= set(rpm_packages.RPM_PACKAGES), sorted(wanted - set(rpm_packages.RPM_PACKAGES))
