"""The release table's reader: which release an image is, what it needs on 310P, and when it is refused."""
import copy
import json

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from conformance import rendered
from serving_plans import PLAN_SETTINGS, host, vllm_server

from ansible_collections.ascend.fleet.plugins.filter import fleet
from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases
from conftest import REPO

QUAY = "quay.io/ascend/vllm-ascend:"
EAGER = {"released": "2026-04-01", "vllm": "0.18.0", "cann": "8.5.1", "driver_min": "25.0.rc1", "python": "3.11",
         "mode": "eager", "compilation_config": {}, "additional_config": {}, "dtype": "float16", "shm_size": "10g",
         "env": {}, "env_unsupported": {"HCCL_OP_EXPANSION_MODE": "not on 300I Duo"}, "defects": [],
         "sources": ["notes"]}
GRAPH = dict(EAGER, vllm="0.23.0", cann="9.1.0", mode="graph",
             compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"},
             additional_config={"ascend_compilation_config": {"enable_npugraph_ex": False}})
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
    assert found["server"] == {"enforce_eager": True, "compilation_config": {}, "additional_config": {},
                               "dtype": "float16", "shm_size": "10g", "env": {}}
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
    # An image the table does not know has no CANN it knows of: its warning says so, and nothing is refused.
    unknown = vllm_releases.release_for("registry:5000/site/vllm:1", releases, driver_version="24.1.rc2.2")
    assert unknown["refusal"] == "" and unknown["warning"]


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


def test_a_graph_mode_release_renders_its_compilation_config_and_one_additional_config_with_the_roles_keys():
    release = vllm_releases.release_for(QUAY + "v0.23.0rc1-310p", vllm_releases.load(),
                                        accepted_defects=["vllm-project/vllm-ascend#12086"])
    argv = rendered.serve_args(layout="per_card", cpu_binding_off=True, release=release)
    assert "--enforce-eager" not in argv
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == release["compilation_config"]
    assert argv.count("--additional-config") == 1
    assert json.loads(argv[argv.index("--additional-config") + 1]) == {
        "ascend_compilation_config": {"enable_npugraph_ex": False}, "enable_cpu_binding": False}
    assert argv[argv.index("--dtype") + 1] == "float16"


def test_the_seeds_release_renders_the_seeds_flags():
    argv = rendered.serve_args()
    assert "--enforce-eager" in argv and "--compilation-config" not in argv and "--additional-config" not in argv


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_readmes_release_table_says_what_the_release_table_says(readme):
    rows = {}
    for line in (REPO / readme).read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| v0.") and len(cells) == 5:
            rows[cells[0]] = cells[1:]
    table = vllm_releases.load()["releases"]
    assert sorted(rows) == sorted(table)
    for version, (vllm, cann, mode, verdict) in rows.items():
        entry = table[version]
        assert (vllm, cann, mode) == (entry["vllm"], entry["cann"], entry["mode"]), version
        issues = ["vllm-ascend #%s" % defect["issue"].rsplit("#", 1)[1] for defect in entry["defects"]]
        assert [issue for issue in issues if issue in verdict] == issues and bool(issues) != (
            "serves" in verdict or "可用" in verdict), (version, verdict)


# `vllm serve`'s options as each vLLM version's own parser has them, recorded from real vLLM
# (`python -m conformance.real_vllm options VERSION`).
SERVE_OPTIONS = REPO / "tests" / "fixtures" / "vllm-serve-options"


@pytest.mark.parametrize("version", sorted(vllm_releases.load()["releases"], key=vllm_releases.release_key))
def test_every_flag_the_server_renders_for_a_release_is_an_option_of_its_vllm_version(version):
    table = vllm_releases.load()
    entry = table["releases"][version]
    recorded = json.loads((SERVE_OPTIONS / ("%s.json" % entry["vllm"])).read_text(encoding="utf-8"))
    assert recorded["vllm"] == entry["vllm"] and recorded["source"]
    release = vllm_releases.release_for(QUAY + version + "-310p", table,
                                        accepted_defects=[defect["issue"] for defect in entry["defects"]])
    for what, argv in rendered.every_rendering(release).items():
        flags = [arg.split("=", 1)[0] for arg in argv if arg.startswith("-")]
        assert [flag for flag in flags if flag not in recorded["options"]] == [], (version, what)
