"""plugins/filter/vllm_canary.py: a canary batch passes only when every host of it judged its canary and none failed."""
from ansible_collections.ascend.fleet.plugins.filter.vllm_canary import (
    vllm_canary_batch_failures,
    vllm_canary_image_failures,
)


def test_a_canary_batch_fails_on_any_failure_and_on_any_host_that_was_not_judged():
    passed = {"vllm_canary_judged": True, "vllm_canary_failures": []}
    slower = {"vllm_canary_judged": True, "vllm_canary_failures": ["h2 x: slower"]}
    hostvars = {"h0": passed, "h1": passed, "h2": slower, "h3": {"vllm_canary_failures": []}, "h4": {}}
    assert vllm_canary_batch_failures(["h0", "h1"], hostvars) == []
    assert vllm_canary_batch_failures(["h0", "h2"], hostvars) == ["h2 x: slower"]
    assert vllm_canary_batch_failures(["h0", "h3", "h4"], hostvars) == [
        "h3: failed before its canary was judged", "h4: failed before its canary was judged"]


def test_an_image_that_kills_a_replacement_is_told_once_by_its_size_and_cause_without_the_log():
    """The loop of vllm_probe over (instance, size), small to large, run with failed_when false: the first size
    that failed is told, with the first line of the probe's message and the cause from the log; the log's tail is
    left out (the server phase shows it)."""
    a, b = {"name": "vllm-ascend-npu0", "port": 8000}, {"name": "vllm-ascend-npu1", "port": 8001}
    died = ("vllm-ascend-npu1: the image request answered HTTP 500: EngineCore encountered an "
            "issue.\nCause, from the log: large_image_crash: an image crashed the 310P engine (error 507018)\n"
            "--- last 40 lines of docker logs vllm-ascend-npu1 ---\nERROR RuntimeError: ... error code:507018")
    probes = {"results": [{"item": [a, "640x480"], "answer": "two squares"},
                          {"item": [a, "2560x1440"], "answer": "a screenshot"},
                          {"item": [b, "640x480"], "answer": "two squares"},
                          {"item": [b, "1920x1080"], "msg": died, "failed": False,
                           "error": "the image request answered HTTP 500: EngineCore encountered an issue.",
                           "causes": ["large_image_crash: an image crashed the 310P engine (error 507018)"]},
                          {"item": [b, "2560x1440"], "msg": "vllm-ascend-npu1: not ready: connection refused",
                           "error": "not ready: connection refused", "causes": []}]}
    assert vllm_canary_image_failures(probes, "npu-a") == {"vllm-ascend-npu1": (
        "npu-a vllm-ascend-npu1: the 1920x1080 image: the image request answered "
        "HTTP 500: EngineCore encountered an issue.; large_image_crash: an image crashed the 310P engine (error "
        "507018)")}
    assert vllm_canary_image_failures({"results": [], "skipped": True}, "npu-a") == {}
