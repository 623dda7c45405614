"""The gateway's servers, from the serving plans vllm_server recorded on each serving host (read and checked on
each host by the vllm_plan_info module).

The HAProxy config (templates/haproxy.cfg.j2) and the drain and restore steps (tasks/drain.yml, restore.yml) both
name a server with gateway_server_name, so a server the config defines is the one the runtime API is asked about.
"""
import json
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import INSTANCE_NAME

# HAProxy's rule for names: letters, digits, '-', '_', '.' and ':'. A server name joins the host and the
# instance with ':', which no instance name holds (Docker's rule), so every pair gets a name of its own. Both are
# matched whole (fullmatch): a name ending in a line break would add a line to haproxy.cfg.
HAPROXY_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


def gateway_server_name(host, instance_name):
    """The HAProxy server name of one instance of one serving host: <inventory name>:<instance name>."""
    if not isinstance(host, str) or not HAPROXY_NAME.fullmatch(host):
        raise AnsibleFilterError("serving host %s: its inventory name cannot name an HAProxy server (letters, "
                                 "digits, '-', '_', '.' and ':' only). Fix: rename the host in the inventory, "
                                 "keeping its address in ansible_host" % json.dumps(host))
    if not isinstance(instance_name, str) or not INSTANCE_NAME.fullmatch(instance_name):
        raise AnsibleFilterError("instance %s of %s: expected a container name (letters, digits, '_', '.' and '-', "
                                 "starting with a letter or digit, nothing else). Fix: deploy %s again (ansible-"
                                 "playbook site.yml --tags server --limit %s), which rewrites its serving plan with "
                                 "the names vllm_server_container_name gives"
                                 % (json.dumps(instance_name), host, host, host))
    return "%s:%s" % (host, instance_name)


def inventory_addresses(hosts, hostvars):
    """Inventory name -> the address other machines reach the host at: its ansible_host, else the inventory name.
    The gateway connects to the serving hosts there, and the serving hosts let the gateways in from there."""
    return {host: hostvars[host].get("ansible_host") or host for host in hosts}


def gateway_read_plans(read):
    """The serving plans from the results of vllm_plan_info, one per serving host (item: the host's inventory name).

    Returns {"plans": [{"host", "plan"}], "not_deployed": [hosts], "refused": [hosts]}: a host with no plan file has
    not been deployed yet and serves nothing; one whose read was skipped (refused for its Python) serves nothing.
    """
    plans, not_deployed, refused = [], [], []
    for result in read:
        if result.get("skipped"):
            refused.append(result["item"])
        elif result.get("plan") is None:
            not_deployed.append(result["item"])
        else:
            plans.append({"host": result["item"], "plan": result["plan"]})
    return {"plans": plans, "not_deployed": not_deployed, "refused": refused}


def gateway_backends(plans, addresses):
    """Every instance of every plan as an HAProxy server: name, host, instance, address and port.

    plans: gateway_read_plans' plans. addresses: inventory name -> the address the gateway reaches the host at
    (inventory_addresses; empty or missing: the inventory name). The servers share one backend, so every plan must
    serve the same model, and no two instances may share an address and port.
    """
    servers, served_names = [], {}
    for entry in plans:
        host, plan = entry["host"], entry["plan"]
        instances = plan["instances"]
        served_names.setdefault(plan.get("served_name"), []).append(host)
        address = addresses.get(host) or host
        for instance in instances:
            servers.append({"name": gateway_server_name(host, instance.get("name")), "host": host,
                            "instance": instance["name"], "address": address, "port": instance["port"]})
    if len(served_names) > 1:
        raise AnsibleFilterError("the serving plans serve different models (%s): one backend would send a request "
                                 "for one model to a server of another. Fix: deploy every host of the serving group "
                                 "with the same vllm_server_served_name" % "; ".join(
                                     "%s on %s" % (json.dumps(name), ", ".join(hosts))
                                     for name, hosts in sorted(served_names.items(), key=str)))
    seen = {}
    for server in servers:
        endpoint = "%s:%d" % (server["address"], server["port"])
        if endpoint in seen:
            raise AnsibleFilterError("%s and %s are both at %s. Fix: give each serving host its own ansible_host" % (
                seen[endpoint], server["name"], endpoint))
        seen[endpoint] = server["name"]
    return servers


class FilterModule:
    def filters(self):
        return {"gateway_server_name": gateway_server_name, "gateway_read_plans": gateway_read_plans,
                "gateway_backends": gateway_backends, "inventory_addresses": inventory_addresses}
