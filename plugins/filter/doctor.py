"""The fleet's diagnosis from each host's doctor result (roles/doctor)."""


def doctor_report(hosts, hostvars):
    """{healthy, hosts: [{host, state, summary, findings, plan_problem, bundle}]} for the hosts given (inventory
    names) from Ansible's hostvars: state healthy, unhealthy, or not_diagnosed for a host the doctor did not read
    (unreachable, or the module failed: its summary says why)."""
    rows = []
    for host in hosts:
        facts = hostvars[host]
        result = facts.get("doctor_result") or {}
        packed = facts.get("doctor_packed") or {}
        if "healthy" not in result:
            why = result.get("msg") or "unreachable, or stopped before the doctor ran"
            rows.append({"host": host, "state": "not_diagnosed", "summary": "%s: not diagnosed: %s" % (host, why),
                         "findings": [], "plan_problem": None, "bundle": None})
            continue
        rows.append({"host": host, "state": "healthy" if result["healthy"] else "unhealthy",
                     "summary": result["summary"], "findings": result["findings"],
                     "plan_problem": result.get("plan_problem"),
                     "bundle": {"file": "bundles/%s.tar.gz" % host, "size": packed["size"],
                                "missing": packed["missing"]} if packed.get("dest") else None})
    return {"healthy": all(row["state"] == "healthy" for row in rows), "hosts": rows}


class FilterModule:
    def filters(self):
        return {"doctor_report": doctor_report}
