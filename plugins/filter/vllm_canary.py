"""The canary gate's judgment of a host, of its batch, and the verdict the server phase reads (roles/vllm_canary)."""

# The reason each replacement of a failed batch is rolled back with, followed by the batch's failures.
REJECTED = "rejected by the canary gate of its batch: "


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


def vllm_canary_host_failures(not_serving, probes, gates, host):
    """Why this host's canary failed, one line each; none when it passed. not_serving: the names of the instances the
    server phase started that do not serve; probes: the register of the image probes (as vllm_canary_image_failures
    reads it); gates: the register of vllm_canary_gate over the replacements measured (no results when none was)."""
    return (["%s %s: did not serve" % (host, name) for name in not_serving]
            + list(vllm_canary_image_failures(probes, host).values())
            + ["%s %s" % (host, gate["line"]) for gate in gates.get("results", []) if gate.get("passed") is False])


def vllm_canary_batch_verdict(batch, hostvars):
    """{passed, failures} of the canary batch, judged as one. batch: the batch's inventory names (the first batch of
    the roll, whichever of them failed since); hostvars: Ansible's. A host judges its canary by recording its
    failures (vllm_canary_host_failures, an empty list when it passed); one that recorded nothing failed before its
    verdict - in an earlier phase, or while its benchmark or gate ran - and counts as a failure: no canary that was
    not judged passed."""
    failures = []
    for host in batch:
        found = hostvars[host].get("vllm_canary_host_failures")
        if found is None:
            failures.append("%s: failed before its canary was judged" % host)
        else:
            failures.extend(found)
    return {"passed": not failures, "failures": failures}


def vllm_canary_verdict(batch_verdict, replacements):
    """The verdict the server phase reads on a host of the batch: the batch's (passed, failures) and `rejected`,
    {instance name: why} of each of the host's replacements when the batch failed (a failure on any host rejects
    every replacement of the batch), none when it passed. replacements: the host's replacements the canary took."""
    why = REJECTED + " ; ".join(batch_verdict["failures"])
    rejected = {} if batch_verdict["passed"] else {replacement["name"]: why for replacement in replacements}
    return dict(batch_verdict, rejected=rejected)


class FilterModule:
    def filters(self):
        return {"vllm_canary_image_failures": vllm_canary_image_failures,
                "vllm_canary_host_failures": vllm_canary_host_failures,
                "vllm_canary_batch_verdict": vllm_canary_batch_verdict,
                "vllm_canary_verdict": vllm_canary_verdict}
