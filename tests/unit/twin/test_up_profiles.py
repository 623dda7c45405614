"""`twin up --profile`: which profile (tests/twin/profiles.yml) each demo host gets, checked before anything starts,
and a host whose profile changes made afresh. Nothing here starts a container: the twin's Docker work is replaced."""
import pytest

from twin import fleet, lifecycle
from twin.shell import TwinError


class Recorder:
    """Stands in for the Twin: records what `up` was asked for."""

    calls = []

    def __init__(self, inventory=None):
        pass

    def up(self, *args):
        self.calls.append(args)


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.setattr(lifecycle, "Twin", Recorder)
    Recorder.calls = []
    return Recorder.calls


def refused(capsys, *argv):
    with pytest.raises(SystemExit) as stopped:
        lifecycle.main(list(argv))
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_one_profile_for_every_ascend_host_and_one_per_host(recorded):
    assert lifecycle.main(["up", "--hosts", "3", "--profile", "driver_24_1_rc2",
                           "--profile", "twin-03=kunpeng_fresh"]) == 0
    assert recorded == [(3, None, {"*": "driver_24_1_rc2", "twin-03": "kunpeng_fresh"}, {})]
    assert lifecycle.demo_hosts(3, 0, recorded[0][2]) == {
        "twin-01": "driver_24_1_rc2", "twin-02": "driver_24_1_rc2", "twin-03": "kunpeng_fresh",
        "twin-gw": "gateway_monitoring"}


def test_without_a_profile_the_demo_keeps_its_own(recorded):
    assert lifecycle.main(["up", "--aarch64", "1"]) == 0
    assert recorded == [(None, 1, {}, {})]
    assert lifecycle.demo_hosts(2, 1, {}) == lifecycle.demo_hosts(2, 1)


def test_one_host_and_the_gateway_by_name():
    assert lifecycle.demo_hosts(2, 0, {"twin-02": "chip_container", "twin-gw": "gateway"}) == {
        "twin-01": "seed_duo4", "twin-02": "chip_container", "twin-gw": "gateway"}


@pytest.mark.parametrize("value,expected", [
    ("drivr_24", 'drivr_24: "drivr_24" is no Ascend host profile of %s; expected one of: %s\n' % (
        lifecycle.PROFILES_FILE, ", ".join(lifecycle.host_profiles("ascend")))),
    ("twin-02=gateway", 'twin-02=gateway: "gateway" is no Ascend host profile'),
    ("twin-gw=duo2", 'twin-gw=duo2: "duo2" is no gateway profile of %s; expected one of: gateway, '
                     "gateway_monitoring\n" % lifecycle.PROFILES_FILE),
    ("twin-01=", 'twin-01=: "" is no Ascend host profile'),
])
def test_a_profile_that_is_not_in_the_profiles_is_refused_naming_the_choices(capsys, recorded, value, expected):
    assert expected in refused(capsys, "up", "--profile", value)
    assert recorded == []


def test_the_choices_are_the_profiles_of_the_hosts_group():
    ascend, gateway = lifecycle.host_profiles("ascend"), lifecycle.host_profiles("gateway")
    assert {"duo2", "driver_24_1_rc2", "kunpeng_fresh", "chip_container"} <= set(ascend)
    assert gateway == ["gateway", "gateway_monitoring"]
    assert sorted(ascend + gateway) == sorted(lifecycle.load_profiles())


def test_aarch64_beside_a_profile_for_every_host_is_refused(capsys, recorded):
    assert ("--aarch64 1 with --profile duo2: that profile is every Ascend host's, so it decides their architecture. "
            "Fix: leave out --aarch64" in refused(capsys, "up", "--aarch64", "1", "--profile", "duo2"))
    assert lifecycle.main(["up", "--aarch64", "1", "--profile", "twin-01=duo2"]) == 0
    assert recorded == [(None, 1, {"twin-01": "duo2"}, {})]


def test_profile_is_for_up_only(capsys, recorded):
    assert "--profile is for up, not down" in refused(capsys, "down", "--profile", "duo2")


def twin_without_docker(tmp_path, monkeypatch):
    """A Twin whose images, network and registry are taken as made, and whose fleet starts and removes nothing
    but records the hosts it was to remove."""
    twin = lifecycle.Twin(home=tmp_path / "home", cache=tmp_path / "cache", inventory=tmp_path / "hosts.yml")
    removed = []
    monkeypatch.setattr(lifecycle.Twin, "infrastructure", lambda self, *args: self.load_state())
    monkeypatch.setattr(fleet.Fleet, "up", lambda self: None)
    monkeypatch.setattr(fleet.Fleet, "remove_hosts", lambda self, names: removed.append(names))
    return twin, removed


def test_a_host_not_in_the_demo_is_refused_before_anything_starts(tmp_path, monkeypatch):
    twin, _removed = twin_without_docker(tmp_path, monkeypatch)
    monkeypatch.setattr(lifecycle.Twin, "infrastructure", lambda self, *args: pytest.fail("the twin was started"))
    with pytest.raises(TwinError, match=r"--profile twin-03=duo2: the demo fleet has no host twin-03 \(its hosts: "
                                        r"twin-01, twin-02, twin-gw\). Fix: name one of them, or give --hosts"):
        twin.up(2, None, {"twin-03": "duo2"})


def test_a_host_given_another_profile_is_made_afresh_and_the_choice_recorded(tmp_path, monkeypatch):
    twin, removed = twin_without_docker(tmp_path, monkeypatch)
    twin.up(2)
    assert removed == [] and twin.load_state()["hosts"]["twin-02"] == "duo2"
    twin.up(None, None, {"twin-02": "chip_container"})
    assert removed == [["twin-02"]]
    assert twin.load_state()["hosts"] == {"twin-01": "seed_duo4", "twin-02": "chip_container",
                                          "twin-gw": "gateway_monitoring"}
    twin.up(None, None, {"twin-02": "chip_container"})
    assert removed == [["twin-02"]], "an unchanged profile remade the host"
    # Without --profile, each host goes back to the demo's profile: another machine again.
    twin.up()
    assert removed == [["twin-02"], ["twin-02"]]


def test_one_operating_system_for_every_host_and_one_per_host(recorded):
    assert lifecycle.main(["up", "--os", "openeuler", "--os", "twin-gw=uos"]) == 0
    assert recorded == [(None, None, {}, {"*": "openeuler", "twin-gw": "uos"})]


@pytest.mark.parametrize("argv,expected", [
    (["up", "--os", "centos"], '"centos" is no operating system of %s; expected one of: debian, kylin, openeuler, uos'
     % lifecycle.DISTRIBUTIONS_FILE),
    (["status", "--os", "uos"], "--os is for up, not status"),
])
def test_an_operating_system_the_twin_has_not_is_refused_naming_the_choices(capsys, recorded, argv, expected):
    assert expected in refused(capsys, *argv)
    assert recorded == []


def test_the_operating_systems_are_given_to_the_hosts_kept_and_a_change_remakes_the_host(tmp_path, monkeypatch):
    twin, removed = twin_without_docker(tmp_path, monkeypatch)
    twin.up(2, None, None, {"*": "openeuler", "twin-gw": "uos"})
    assert twin.load_state()["hosts"] == {"twin-01": "seed_duo4@openeuler", "twin-02": "duo2@openeuler",
                                          "twin-gw": "gateway_monitoring@uos"}
    # Without --os each host keeps the one it has; another one is another machine.
    twin.up()
    assert removed == [] and twin.load_state()["hosts"]["twin-gw"] == "gateway_monitoring@uos"
    twin.up(None, None, None, {"twin-02": "debian"})
    assert removed == [["twin-02"]] and twin.load_state()["hosts"]["twin-02"] == "duo2"


@pytest.mark.parametrize("systems,expected", [
    ({"twin-09": "uos"}, r"--os twin-09=uos: the demo fleet has no host twin-09"),
    ({"*": "kylin"}, r"--os kylin: twin-02 is a Kunpeng \(aarch64\) host.*Fix: leave out --aarch64"),
])
def test_an_os_a_host_cannot_have_is_refused_before_anything_starts(tmp_path, monkeypatch, systems, expected):
    twin, _removed = twin_without_docker(tmp_path, monkeypatch)
    monkeypatch.setattr(lifecycle.Twin, "infrastructure", lambda self, *args: pytest.fail("the twin was started"))
    with pytest.raises(TwinError, match=expected):
        twin.up(2, 1, None, systems)
