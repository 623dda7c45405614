"""Where the benchmark record is restated outside module_utils/bench_record.py, it says what bench_record says."""
import yaml

from bench_record import FIELD_NAMES, LATENCY_TARGET_S
from conftest import REPO, load_library_module


def test_the_modules_documented_group_is_a_record():
    documented = yaml.safe_load(load_library_module("vllm_load_test").RETURN)["groups"]["sample"][0]
    assert list(documented) == list(FIELD_NAMES) + ["resumed"]


def test_the_roles_latency_target_is_the_reports():
    defaults = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text(encoding="utf-8"))
    specs = yaml.safe_load((REPO / "roles/vllm_bench/meta/argument_specs.yml").read_text(encoding="utf-8"))
    assert defaults["vllm_bench_latency_target_s"] == LATENCY_TARGET_S
    assert specs["argument_specs"]["main"]["options"]["vllm_bench_latency_target_s"]["default"] == LATENCY_TARGET_S
