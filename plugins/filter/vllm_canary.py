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


class FilterModule:
    def filters(self):
        return {"vllm_canary_batch_failures": vllm_canary_batch_failures}
