"""The canary gate's judgment of a batch (roles/vllm_canary)."""


def vllm_canary_batch_failures(batch, hostvars):
    """Why the canary batch failed, one line each; none when it passed. batch: the batch's inventory names (the
    first batch of the roll, whichever of them failed since); hostvars: Ansible's. A host that has not marked its
    canary judged (vllm_canary_judged) failed before its verdict - in an earlier phase, or while its benchmark or
    gate ran - and counts as a failure; a judged host adds its failures (vllm_canary_failures)."""
    failures = []
    for host in batch:
        facts = hostvars[host]
        if not facts.get("vllm_canary_judged"):
            failures.append("%s: failed before its canary was judged" % host)
        else:
            failures.extend(facts.get("vllm_canary_failures") or [])
    return failures


def vllm_canary_image_failures(probes, host):
    """{instance name: one line} of each replacement that failed an image of the canary (the results of the loop of
    vllm_probe over (instance, image size), run with failed_when false, so that a failure is a result with a
    message; skipped, no results): the host, the instance, the image size, what failed and the cause its log shows,
    without the log's tail. The first image an instance failed is the one told: its engine is dead after it."""
    failures = {}
    for result in probes.get("results", []):
        instance, size = result["item"]
        if "msg" not in result or instance["name"] in failures:
            continue
        # A probe that could not run (a bad option) has no error of its own: its message is one line.
        failures[instance["name"]] = "%s %s: the %s image: %s" % (host, instance["name"], size, "; ".join(
            [result.get("error") or result["msg"]] + (result.get("causes") or [])))
    return failures


class FilterModule:
    def filters(self):
        return {"vllm_canary_batch_failures": vllm_canary_batch_failures,
                "vllm_canary_image_failures": vllm_canary_image_failures}
