"""The twin's aarch64 hosts without Docker: which hosts the demo makes, what each architecture is called, what
an emulated host needs from this machine, and the Kunpeng /proc/cpuinfo it is given."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils.npu_smi import parse_cpu_model
from twin import hosts, lifecycle, platforms
from twin.shell import TwinError


def test_the_demo_makes_its_last_hosts_kunpeng_ones():
    assert lifecycle.demo_hosts(3, aarch64=1) == {"twin-01": "seed_duo4", "twin-02": "duo2",
                                                  "twin-03": "kunpeng_seed_duo4", "twin-gw": "gateway_monitoring"}
    assert lifecycle.demo_hosts(2) == {"twin-01": "seed_duo4", "twin-02": "duo2", "twin-gw": "gateway_monitoring"}
    profiles = hosts.load_profiles()
    assert profiles["kunpeng_seed_duo4"] == dict(profiles["seed_duo4"], architecture="aarch64")


def test_more_aarch64_hosts_than_hosts_is_refused_with_the_fix(tmp_path):
    twin = lifecycle.Twin(home=tmp_path / "home", cache=tmp_path / "cache", inventory=tmp_path / "hosts.yml")
    with pytest.raises(TwinError, match=r"--aarch64 3: more than the 2 demo hosts. Fix: give --hosts 3 or more"):
        twin.demo_fleet(2, aarch64=3)


def test_platforms_are_named_as_docker_and_quay_io_name_them():
    assert platforms.oci_platform("aarch64") == "linux/arm64/v8"
    assert platforms.oci_platform("x86_64") == "linux/amd64"
    assert platforms.oci_platform("aarch64", as_dict=True) == {"os": "linux", "architecture": "arm64", "variant": "v8"}


def test_each_architecture_has_its_own_roots_and_an_emulated_host_root_says_what_is_native(monkeypatch):
    tags = {(kind, architecture): lifecycle.Twin.root_tag(kind, architecture)
            for kind in lifecycle.ROOTS for architecture in ("x86_64", "aarch64")}
    assert len(set(tags.values())) == len(tags)
    assert tags[("host", "aarch64")].startswith("bookworm-arm64-")
    # What an emulated root installs of this machine's own is part of its name: changing the list rebuilds it.
    emulated = "aarch64" if platforms.NATIVE == "x86_64" else "x86_64"
    monkeypatch.setattr(lifecycle, "NATIVE_ON_EMULATED", ("docker.io",))
    assert lifecycle.Twin.root_tag("host", emulated) != tags[("host", emulated)]
    assert lifecycle.Twin.root_tag("host", platforms.NATIVE) == tags[("host", platforms.NATIVE)]


@pytest.mark.parametrize("content, found", [(None, "not registered"), ("enabled\nflags: P\n", "flags P"),
                                            ("disabled\nflags: PF\n", "registered but disabled")])
def test_emulation_without_the_fix_binary_flag_is_named_with_the_fix(tmp_path, monkeypatch, content, found):
    entry = tmp_path / "qemu-%s"
    if content is not None:
        (tmp_path / "qemu-aarch64").write_text(content)
    monkeypatch.setattr(platforms, "BINFMT", str(entry))
    with pytest.raises(TwinError) as refused:
        platforms.require_emulation("aarch64")
    assert found in str(refused.value) and "apt-get install qemu-user-static binfmt-support" in str(refused.value)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                                          "flags: PF\noffset 0\n")
    platforms.require_emulation("aarch64")


def test_a_kunpeng_host_reads_a_kunpeng_920_for_each_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(hosts.os, "cpu_count", lambda: 3)
    text = hosts.write_cpuinfo(tmp_path, "aarch64").read_text()
    assert text.count("processor\t: ") == 3 and "processor\t: 2\n" in text
    assert parse_cpu_model(text) == "Kunpeng-920"
    with pytest.raises(ValueError, match="emulates aarch64 only"):
        hosts.write_cpuinfo(tmp_path, "riscv64")
