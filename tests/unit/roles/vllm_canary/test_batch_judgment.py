"""plugins/filter/vllm_canary.py: a canary batch passes only when every host of it judged its canary and none failed."""
from ansible_collections.ascend.fleet.plugins.filter.vllm_canary import vllm_canary_batch_failures


def test_a_canary_batch_fails_on_any_failure_and_on_any_host_that_was_not_judged():
    passed = {"vllm_canary_judged": True, "vllm_canary_failures": []}
    slower = {"vllm_canary_judged": True, "vllm_canary_failures": ["h2 x: slower"]}
    hostvars = {"h0": passed, "h1": passed, "h2": slower, "h3": {"vllm_canary_failures": []}, "h4": {}}
    assert vllm_canary_batch_failures(["h0", "h1"], hostvars) == []
    assert vllm_canary_batch_failures(["h0", "h2"], hostvars) == ["h2 x: slower"]
    assert vllm_canary_batch_failures(["h0", "h3", "h4"], hostvars) == [
        "h3: failed before its canary was judged", "h4: failed before its canary was judged"]
