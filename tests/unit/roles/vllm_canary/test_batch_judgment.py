"""plugins/filter/vllm_canary.py: a host's canary fails on an instance that does not serve, an image that kills a
replacement, or a gate that found it worse than its baseline; a canary batch passes only when every host of it judged
its canary and none failed; and the verdict the server phase reads rejects every replacement of a batch that failed."""
from ansible_collections.ascend.fleet.plugins.filter.vllm_canary import (
    vllm_canary_batch_verdict,
    vllm_canary_host_failures,
    vllm_canary_image_failures,
    vllm_canary_verdict,
)


def test_a_canary_batch_fails_on_any_failure_and_on_any_host_that_was_not_judged():
    """A judged host recorded its failures (none when it passed); one that failed before its verdict (h3: in an
    earlier phase, h4: while its benchmark ran, with facts of its own but no judgement) recorded nothing."""
    passed = {"vllm_canary_host_failures": []}
    slower = {"vllm_canary_host_failures": ["h2 x: slower"]}
    hostvars = {"h0": passed, "h1": passed, "h2": slower, "h3": {}, "h4": {"vllm_canary_measured": []}}
    assert vllm_canary_batch_verdict(["h0", "h1"], hostvars) == {"passed": True, "failures": []}
    assert vllm_canary_batch_verdict(["h0", "h2"], hostvars) == {"passed": False, "failures": ["h2 x: slower"]}
    assert vllm_canary_batch_verdict(["h0", "h3", "h4"], hostvars) == {"passed": False, "failures": [
        "h3: failed before its canary was judged", "h4: failed before its canary was judged"]}


def test_the_verdict_rejects_every_replacement_of_a_batch_that_failed_and_none_of_one_that_passed():
    """What the server phase reads on each host: the batch's verdict, with this host's replacements rejected when any
    host of the batch failed, its own passing ones too."""
    replacements = [{"name": "vllm-ascend-npu0", "port": 8000}, {"name": "vllm-ascend-npu1", "port": 8001}]
    failed = {"passed": False, "failures": ["h2 x: slower", "h3: failed before its canary was judged"]}
    why = ("rejected by the canary gate of its batch: h2 x: slower ; h3: failed before its canary was judged")
    assert vllm_canary_verdict(failed, replacements) == dict(failed, rejected={
        "vllm-ascend-npu0": why, "vllm-ascend-npu1": why})
    assert vllm_canary_verdict(failed, []) == dict(failed, rejected={})
    passed = {"passed": True, "failures": []}
    assert vllm_canary_verdict(passed, replacements) == {"passed": True, "failures": [], "rejected": {}}


def test_a_hosts_canary_fails_on_what_did_not_serve_each_image_that_killed_a_replacement_and_each_gate_it_failed():
    """In that order, each line starting with the host: the probes' and the gates' registers as the role's loops
    leave them (the image probes run with failed_when false; a gate that passed adds nothing)."""
    a, b, c = ({"name": "vllm-ascend-npu%d" % number, "port": 8000 + number} for number in range(3))
    probes = {"results": [{"item": [a, "2560x1440"], "answer": "a screenshot"},
                          {"item": [b, "2560x1440"], "msg": "vllm-ascend-npu1: the image request answered HTTP 500",
                           "error": "the image request answered HTTP 500", "causes": ["large_image_crash: ..."]}]}
    gates = {"results": [{"item": a, "passed": True, "line": "vllm-ascend-npu0 (image): throughput +1.0 %"},
                         {"item": c, "passed": False, "line": "vllm-ascend-npu2 (image): throughput -23.0 %"}]}
    assert vllm_canary_host_failures(["vllm-ascend-npu3"], probes, gates, "npu-a") == [
        "npu-a vllm-ascend-npu3: did not serve",
        "npu-a vllm-ascend-npu1: the 2560x1440 image: the image request answered HTTP 500; large_image_crash: ...",
        "npu-a vllm-ascend-npu2 (image): throughput -23.0 %"]
    # Nothing measured: the gate's loop had no items.
    skipped = {"results": [], "skipped": True, "skipped_reason": "No items in the list"}
    assert vllm_canary_host_failures([], {"results": []}, skipped, "npu-a") == []
    assert vllm_canary_host_failures([], probes, skipped, "npu-a") == [
        "npu-a vllm-ascend-npu1: the 2560x1440 image: the image request answered HTTP 500; large_image_crash: ..."]


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
