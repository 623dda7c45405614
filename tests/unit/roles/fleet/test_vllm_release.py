"""The release table's reader: which release an image is, what it needs on 310P, and when it is refused."""
import copy

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from serving_plans import PLAN_SETTINGS, host, vllm_server

from ansible_collections.ascend.fleet.plugins.filter import fleet
from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases

QUAY = "quay.io/ascend/vllm-ascend:"
EAGER = {"released": "2026-03-27", "vllm": "0.18.0", "cann": "8.5.1", "driver_min": "25.5.0", "python": "3.11",
         "mode": "eager", "compilation_config": {}, "dtype": "float16", "shm_size": "10g", "env": {},
         "env_unsupported": {"HCCL_OP_EXPANSION_MODE": "not on 300I Duo"}, "defects": [], "sources": ["notes"]}
GRAPH = dict(EAGER, vllm="0.18.0", cann="9.0.0", mode="graph",
             compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"})
KILLS_IMAGES = {"issue": "vllm-project/vllm-ascend#12086", "summary": "every request with an image kills EngineCore",
                "kills": "image_requests", "fixed_in": None, "log": ["aicpu exception 507018"]}
KILLS_LARGE = {"issue": "vllm-project/vllm-ascend#13050", "summary": "large images kill EngineCore",
               "kills": "large_image_requests", "above_pixels": 2000000, "fixed_in": "v0.24.0", "log": []}


def table(**releases):
    """A table as load() returns it, of these releases (the real one's shape), unknown images as v0.18.0rc1."""
    return {"unknown": "v0.18.0rc1", "releases": dict({"v0.18.0rc1": EAGER}, **releases)}


def broken(*defects):
    return dict(GRAPH, defects=list(defects))


def test_the_table_loads_and_its_default_release_serves_in_eager_float16():
    found = vllm_releases.release_for(QUAY + "v0.18.0rc1-310p", vllm_releases.load(), driver_version="25.5.2")
    assert (found["known"], found["version"], found["variant"]) == (True, "v0.18.0rc1", "ubuntu")
    assert found["server"] == {"enforce_eager": True, "compilation_config": {}, "dtype": "float16",
                               "shm_size": "10g", "env": {}}
    assert (found["refusal"], found["warning"]) == ("", "")


@pytest.mark.parametrize("image, version, variant", [
    (QUAY + "v0.18.0-310p-openeuler", "v0.18.0", "openeuler"),
    ("registry.example.cn:5000/ascend/vllm-ascend:v0.18.0-310p", "v0.18.0", "ubuntu"),
    ("m.daocloud.io/quay.io/ascend/vllm-ascend:v0.18.0-310p@sha256:" + "a" * 64, "v0.18.0", "ubuntu"),
])
def test_the_release_is_read_from_the_tag_wherever_the_image_comes_from(image, version, variant):
    found = vllm_releases.release_for(image, table(**{"v0.18.0": GRAPH}))
    assert (found["version"], found["variant"], found["known"]) == (version, variant, True)
    assert found["server"]["enforce_eager"] is False
    assert found["server"]["compilation_config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}


@pytest.mark.parametrize("image", [QUAY + "v0.99.0-310p", "registry:5000/site/vllm:latest", "registry:5000/vllm"])
def test_an_image_the_table_does_not_know_gets_the_conservative_settings_and_a_warning(image):
    found = vllm_releases.release_for(image, table(**{"v0.18.0": GRAPH}))
    assert found["known"] is False and found["version"] == ""
    assert found["server"]["enforce_eager"] is True and found["refusal"] == ""
    assert image in found["warning"]
    assert vllm_releases.TABLE_NAME in found["warning"] and "fleet_image_release" in found["warning"]


def test_a_site_build_named_as_a_known_release_gets_that_release():
    found = vllm_releases.release_for("registry:5000/site/vllm:2026-10-01", table(**{"v0.18.0": GRAPH}),
                                      release_as="v0.18.0")
    assert (found["known"], found["version"], found["warning"]) == (True, "v0.18.0", "")
    with pytest.raises(vllm_releases.ReleaseTableError, match="fleet_image_release is 'v0.18.9'.*v0.18.0rc1"):
        vllm_releases.release_for("registry:5000/site/vllm:1", table(), release_as="v0.18.9")


def test_a_release_whose_defect_kills_image_requests_is_refused_naming_it_and_the_nearest_good_ones():
    releases = table(**{"v0.18.0": GRAPH, "v0.22.1rc1": broken(KILLS_IMAGES), "v0.23.0rc1": broken(KILLS_IMAGES),
                        "v0.24.0": GRAPH})
    refusal = vllm_releases.release_for(QUAY + "v0.23.0rc1-310p", releases)["refusal"]
    assert "vllm-project/vllm-ascend#12086" in refusal and "every request with an image kills" in refusal
    assert "not fixed yet" in refusal
    assert "v0.18.0 (older), v0.24.0 (newer)" in refusal
    assert "fleet_image_accept_defects" in refusal and QUAY + "v0.23.0rc1-310p" in refusal


def test_an_accepted_defect_passes_and_another_one_is_still_refused():
    releases = table(**{"v0.23.0rc1": broken(KILLS_IMAGES, KILLS_LARGE)})
    image = QUAY + "v0.23.0rc1-310p"
    refusal = vllm_releases.release_for(image, releases, accepted_defects=[KILLS_IMAGES["issue"]])["refusal"]
    assert "#13050" in refusal and "#12086" not in refusal and "fixed in v0.24.0" in refusal
    accepted = vllm_releases.release_for(image, releases, accepted_defects=[KILLS_IMAGES["issue"],
                                                                            KILLS_LARGE["issue"]])
    assert accepted["refusal"] == "" and accepted["refused"] == [] and len(accepted["defects"]) == 2


def test_a_release_whose_cann_needs_a_newer_driver_than_the_fleets_is_refused():
    releases = table(**{"v0.21.0rc1": dict(GRAPH, cann="9.1.0", driver_min="25.5.rc1")})
    image = QUAY + "v0.21.0rc1-310p"
    assert vllm_releases.release_for(image, releases, driver_version="25.5.2")["refusal"] == ""
    refusal = vllm_releases.release_for(image, releases, driver_version="24.1.rc2.2")["refusal"]
    assert "needs NPU driver 25.5.rc1 or later" in refusal and "fleet_driver_version 24.1.rc2.2" in refusal


@pytest.mark.parametrize("change, message", [
    (lambda entry: entry.pop("cann"), r"missing \['cann'\]"),
    (lambda entry: entry.update(colour="red"), r"unknown \['colour'\]"),
    (lambda entry: entry.update(mode="turbo"), "mode is 'turbo': expected one of eager, graph"),
    (lambda entry: entry.update(mode="graph"), "graph mode needs a compilation_config"),
    (lambda entry: entry.update(dtype=16), "dtype is 16: expected a str"),
    (lambda entry: entry.update(defects=[dict(KILLS_IMAGES, kills="everything")]), "kills 'everything'"),
    (lambda entry: entry.update(defects=[dict(KILLS_IMAGES, kills="large_image_requests")]), "above_pixels"),
])
def test_a_table_entry_that_is_not_as_expected_is_refused_naming_the_release_and_field(tmp_path, change, message):
    entry = copy.deepcopy(EAGER)
    change(entry)
    path = tmp_path / "releases.yml"
    path.write_text(yaml.safe_dump({"unknown": "v0.18.0rc1", "releases": {"v0.18.0rc1": entry}}))
    with pytest.raises(vllm_releases.ReleaseTableError, match="release v0.18.0rc1: .*" + message):
        vllm_releases.load(path)


def test_a_table_without_its_unknown_release_or_with_a_bad_version_is_refused(tmp_path):
    path = tmp_path / "releases.yml"
    path.write_text(yaml.safe_dump({"unknown": "v0.17.0", "releases": {"v0.18.0rc1": EAGER}}))
    with pytest.raises(vllm_releases.ReleaseTableError, match="`unknown` is 'v0.17.0'"):
        vllm_releases.load(path)
    path.write_text(yaml.safe_dump({"unknown": "0.18", "releases": {"0.18": EAGER}}))
    with pytest.raises(vllm_releases.ReleaseTableError, match="'0.18' is no vLLM-Ascend version"):
        vllm_releases.load(path)


def test_release_order_puts_a_release_after_its_candidates_and_before_its_post_releases():
    order = ["v0.18.0rc1", "v0.18.0rc2", "v0.18.0", "v0.18.0.post1", "v0.18.1rc1", "v0.23.0"]
    assert sorted(reversed(order), key=vllm_releases.release_key) == order


def test_the_filter_fails_with_the_readers_message():
    with pytest.raises(AnsibleFilterError, match="fleet_image_release is 'v9'"):
        fleet.vllm_release(QUAY + "v0.18.0rc1-310p", "v9")


def test_a_variable_the_release_must_not_get_is_refused_before_the_plan():
    settings = dict(PLAN_SETTINGS, env={"HCCL_OP_EXPANSION_MODE": "AIV", "PYTORCH_NPU_ALLOC_CONF": "x"},
                    env_unsupported=EAGER["env_unsupported"])
    with pytest.raises(AnsibleFilterError, match="sets HCCL_OP_EXPANSION_MODE, which quay.io/ascend/vllm-ascend:"
                                                 "v0.18.0rc1-310p must not get on 310P: HCCL_OP_EXPANSION_MODE: not "
                                                 "on 300I Duo. Fix: remove HCCL_OP_EXPANSION_MODE"):
        vllm_server.vllm_server_plan(host(), settings)
