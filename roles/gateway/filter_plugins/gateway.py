"""The gateway's servers, from the serving plans vllm_server recorded on each serving host.

The HAProxy config (templates/haproxy.cfg.j2) and the drain and restore steps (tasks/drain.yml, restore.yml) both
name a server with gateway_server_name, so a server the config defines is the one the runtime API is asked about.
"""
import base64
import binascii
import json
import re

from ansible.errors import AnsibleFilterError

# The plan format vllm_server writes (PLAN_FORMAT in roles/vllm_server/filter_plugins/vllm_server.py).
PLAN_FORMAT = 1
# HAProxy's rule for names: letters, digits, '-', '_', '.' and ':'. A server name joins the host and the
# instance with ':', which no instance name holds (Docker's rule), so every pair gets a name of its own.
HAPROXY_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")
INSTANCE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
# slurp's message for a file that does not exist (lower case in older Ansible): the host is not deployed yet.
NOT_FOUND = "file not found"
FIX_DEPLOY = "Fix: deploy the host again (ansible-playbook site.yml --tags server --limit %s), which rewrites it"


def gateway_server_name(host, instance_name):
    """The HAProxy server name of one instance of one serving host: <inventory name>:<instance name>."""
    if not isinstance(host, str) or not HAPROXY_NAME.match(host):
        raise AnsibleFilterError("serving host %s: its inventory name cannot name an HAProxy server (letters, "
                                 "digits, '-', '_', '.' and ':' only). Fix: rename the host in the inventory, "
                                 "keeping its address in ansible_host" % json.dumps(host))
    if not isinstance(instance_name, str) or not INSTANCE_NAME.match(instance_name):
        raise AnsibleFilterError("instance %s of %s: expected a container name (letters, digits, '_', '.' and '-', "
                                 "starting with a letter or digit)" % (json.dumps(instance_name), host))
    return "%s:%s" % (host, instance_name)


def gateway_read_plans(slurped, plan_file):
    """The serving plans from the results of slurp, one per serving host (item: the host's inventory name).

    Returns {"plans": [{"host", "plan"}], "not_deployed": [hosts]}: a host whose plan file does not exist has not
    been deployed yet and serves nothing. A plan file that exists but cannot be read or is not a plan fails,
    naming the host: leaving that host out would take instances that may serve out of the gateway.
    """
    plans, not_deployed = [], []
    for result in slurped:
        host = result["item"]
        if "content" not in result:
            message = result.get("msg", "no content")
            if NOT_FOUND in message.lower():
                not_deployed.append(host)
                continue
            raise AnsibleFilterError("serving plan of %s: could not read it (%s). Fix: check that the gateway's "
                                     "connection to %s may read %s (become)" % (host, message, host, plan_file))
        try:
            plan = json.loads(base64.b64decode(result["content"]).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError, ValueError) as error:
            raise AnsibleFilterError("serving plan of %s: %s is not JSON (%s). %s" % (
                host, result.get("source", plan_file), error, FIX_DEPLOY % host)) from None
        plans.append({"host": host, "plan": plan})
    return {"plans": plans, "not_deployed": not_deployed}


def _check_plan(host, plan, plan_file):
    """The plan's instances, once the plan is one vllm_server wrote for this host; AnsibleFilterError otherwise."""
    where = "serving plan of %s (%s)" % (host, plan_file)
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        found = plan.get("format") if isinstance(plan, dict) else type(plan).__name__
        raise AnsibleFilterError("%s: format %s, expected %d. %s" % (
            where, json.dumps(found), PLAN_FORMAT, FIX_DEPLOY % host))
    if plan.get("host") != host:
        raise AnsibleFilterError("%s: it is the plan of %s, not of %s (a copied file?). %s" % (
            where, json.dumps(plan.get("host")), host, FIX_DEPLOY % host))
    instances = plan.get("instances")
    if not isinstance(instances, list) or not instances:
        raise AnsibleFilterError("%s: no instances. %s" % (where, FIX_DEPLOY % host))
    for instance in instances:
        port = instance.get("port") if isinstance(instance, dict) else None
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise AnsibleFilterError("%s: instance %s has port %s, expected a number from 1 to 65535. %s" % (
                where, json.dumps(instance.get("name") if isinstance(instance, dict) else instance),
                json.dumps(port), FIX_DEPLOY % host))
    return instances


def gateway_backends(plans, addresses, plan_file):
    """Every instance of every plan as an HAProxy server: name, host, instance, address and port.

    plans: gateway_read_plans' plans. addresses: inventory name -> the address the gateway reaches the host at
    (its ansible_host; empty or missing: the inventory name). The servers share one backend, so every plan must
    serve the same model, and no two instances may share an address and port.
    """
    servers, served_names = [], {}
    for entry in plans:
        host, plan = entry["host"], entry["plan"]
        instances = _check_plan(host, plan, plan_file)
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
                "gateway_backends": gateway_backends}
