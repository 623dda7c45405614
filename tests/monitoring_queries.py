"""What the tests of the monitoring role share: the series the monitoring contract names, the PromQL of every
dashboard panel with Grafana's variables replaced so that Prometheus can run it, a synthetic healthy fleet that
serves traffic (as `promtool test rules` input series), and promtool itself."""
import json
import os
import re
import subprocess

import jinja2
import pytest
import yaml

from conftest import GATEWAY_BACKEND, REPO, venv_tool

ROLE = REPO / "roles" / "monitoring"
DASHBOARDS = ROLE / "templates" / "dashboards"

# --- the contract's series -------------------------------------------------------------------------------------
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")
CONTRACT_SERIES = frozenset(
    ["up", "probe_success", "probe_http_status_code", "ascend_fleet_path_info",
     "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:prompt_tokens_total",
     "vllm:generation_tokens_total", "vllm:request_success_total", "vllm:kv_cache_usage_perc",
     "process_resident_memory_bytes", "process_start_time_seconds",
     "npu_chip_info_health_status", "npu_chip_info_temperature", "npu_chip_info_power", "npu_chip_info_utilization",
     "npu_chip_info_used_memory", "npu_chip_info_total_memory", "machine_npu_nums", "npu_driver_info",
     "npu_exporter_npu_smi_up", "npu_exporter_collect_duration_seconds", "npu_exporter_docker_up",
     "ascend_fleet_instance_restarts_total"]
    + [name + suffix for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")])
# The node exporter's and HAProxy's own series: the contract names their families, not each series.
CONTRACT_PREFIXES = ("node_", "haproxy_")


def is_contract_series(name):
    return name in CONTRACT_SERIES or name.startswith(CONTRACT_PREFIXES)


# Words of PromQL that read like a metric name where they stand.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "atan2", "inf", "nan"}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
NAME = re.compile(r"(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr):
    """The metric names an expression selects: what is left once strings, label matchers, ranges and label lists
    are out, and is no function (followed by an opening parenthesis) or keyword."""
    text = STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = LABEL_LIST.sub(" ", text)
    names = set()
    for match in NAME.finditer(text):
        if text[match.end():].lstrip().startswith("(") or match.group(0).lower() in KEYWORDS:
            continue
        names.add(match.group(0))
    return names


# --- the dashboards -------------------------------------------------------------------------------------------
# Grafana's interval variables as a Prometheus that scrapes every 15 s would get them for a short time range.
INTERVALS = {"__rate_interval": "1m", "__interval": "1m", "__range": "5m"}
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def dashboard_names():
    """The dashboards by the names the role installs them under: their templates' (templates/dashboards), less .j2."""
    return sorted(path.name[:-len(".j2")] for path in DASHBOARDS.glob("*.json.j2"))


def dashboard_text(name):
    """A dashboard as the role renders it (monitoring_dashboard_text in vars/main.yml): its template with the
    fleet's values in, between the delimiters the role's lookup names."""
    lookup = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["monitoring_dashboard_text"]
    start, end = re.search(r"variable_start_string='([^']+)', variable_end_string='([^']+)'", lookup).groups()
    environment = jinja2.Environment(variable_start_string=start, variable_end_string=end,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = environment.from_string((DASHBOARDS / (name + ".j2")).read_text(encoding="utf-8"))
    return template.render(fleet_gateway_backend=GATEWAY_BACKEND)


def load(name):
    return json.loads(dashboard_text(name))


def panels(dashboard):
    """Every panel, the ones inside (collapsed) rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def substitute(expr, variables):
    """expr with Grafana's variables replaced: the interval ones by INTERVALS, the dashboard's own by their value
    for All (".*", matched with =~ as every panel does). An unknown variable is left as it is, for the tests to see."""
    def value(match):
        name = match.group(1) or match.group(2)
        if name in INTERVALS:
            return INTERVALS[name]
        if name in variables:
            return variables[name].get("allValue") or ".*"
        return match.group(0)
    return VARIABLE.sub(value, expr)


def template_variables(dashboard):
    return {variable["name"]: variable for variable in dashboard.get("templating", {}).get("list", [])}


def dashboard_queries():
    """(dashboard uid, panel title, expr) for every target of every dashboard file, ready for Prometheus."""
    queries = []
    for name in dashboard_names():
        dashboard = load(name)
        variables = template_variables(dashboard)
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if "expr" in target:
                    queries.append((dashboard["uid"], panel.get("title", ""), substitute(target["expr"], variables)))
    return queries


LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)


def variable_queries():
    """(dashboard uid, variable name, selector) for every label_values(selector, label) variable, ready for
    Prometheus (the variables it refers to replaced as in dashboard_queries)."""
    queries = []
    for dashboard_name in dashboard_names():
        dashboard = load(dashboard_name)
        variables = template_variables(dashboard)
        for name, variable in variables.items():
            if variable.get("type") != "query":
                continue
            query = variable.get("query")
            query = query.get("query", "") if isinstance(query, dict) else query
            match = LABEL_VALUES.match(query.strip())
            assert match, "%s: variable %s is no label_values(selector, label): %r" % (dashboard_name, name, query)
            queries.append((dashboard["uid"], name, substitute(match.group(1), variables)))
    return queries


# --- a healthy fleet serving traffic, as promtool's input series -------------------------------------------------
# vLLM's own bucket bounds of its two latency histograms.
BUCKETS = {
    "vllm:time_to_first_token_seconds": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                                         5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
    "vllm:e2e_request_latency_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0],
}
HOSTS = {"npu-node-01": "192.0.2.11", "npu-node-02": "192.0.2.12"}
GATEWAY = ("gateway-01", "192.0.2.20")
MODEL = "Qwen3-VL-8B-Instruct"
INSTANCES = (("vllm-qwen3-vl-8b-0", 8000), ("vllm-qwen3-vl-8b-1", 8001))


def series(name, values, **labels):
    """One input series of a promtool test: name{labels} and its values in promtool's notation."""
    text = ",".join('%s="%s"' % (key, value) for key, value in sorted(labels.items()))
    return {"series": "%s{%s}" % (name, text), "values": values}


def flat(value, steps):
    return "%r+0x%d" % (float(value), steps)


def counter(per_step, steps, start=0):
    """start, then per_step more (or less) every step: promtool's a+bxn, a-bxn."""
    return "%r%s%rx%d" % (float(start), "-" if per_step < 0 else "+", abs(float(per_step)), steps)


def histogram(name, per_step, latency, steps, **labels):
    """A histogram of vLLM's buckets to which per_step requests of `latency` seconds are added every step."""
    rows = [series(name + "_bucket", counter(per_step if latency <= bound else 0, steps), le=repr(bound), **labels)
            for bound in BUCKETS[name]]
    rows.append(series(name + "_bucket", counter(per_step, steps), le="+Inf", **labels))
    rows.append(series(name + "_count", counter(per_step, steps), **labels))
    rows.append(series(name + "_sum", counter(per_step * latency, steps), **labels))
    return rows


def vllm_target(host, instance, port):
    return dict(job="vllm", host=host, vllm_instance=instance, instance="%s:%d" % (HOSTS[host], port))


def health_target(host, instance, port):
    return dict(job="vllm_health", host=host, vllm_instance=instance,
                instance="http://%s:%d/health" % (HOSTS[host], port))


def chip(host, logic_id):
    """An NPU collector chip's labels: two chips to a card, as on an Atlas 300I Duo."""
    return dict(job="npu", host=host, instance="%s:8082" % HOSTS[host], id=str(logic_id), model_name="310P3",
                pcie_bus_info="0000:%02x:00.0" % (logic_id + 1), npu_id=str(1 + logic_id // 2),
                chip_id=str(logic_id % 2))


def healthy_fleet(steps):
    """Every series of the contract for two Ascend hosts with two instances and two chips each, a gateway and the
    monitoring host: all up and healthy, serving two requests a step per instance (TTFT 2 s, 15 s end to end), with
    flat memory and no restart. No npu_chip_info_power: a 310P3 Duo prints NA."""
    rows = []
    for host, address in HOSTS.items():
        for instance, port in INSTANCES:
            target = vllm_target(host, instance, port)
            vllm = dict(target, engine="0", model_name=MODEL)
            rows += [series("up", flat(1, steps), **target),
                     series("process_resident_memory_bytes", flat(3.2e9, steps), **target),
                     series("process_start_time_seconds", flat(1.7e9 + port, steps), **target),
                     series("vllm:num_requests_running", flat(6, steps), **vllm),
                     series("vllm:num_requests_waiting", flat(1, steps), **vllm),
                     series("vllm:kv_cache_usage_perc", flat(0.35, steps), **vllm),
                     series("vllm:prompt_tokens_total", counter(2 * 1800, steps), **vllm),
                     series("vllm:generation_tokens_total", counter(2 * 300, steps), **vllm),
                     series("vllm:request_success_total", counter(2, steps), finished_reason="stop", **vllm),
                     series("vllm:request_success_total", counter(0.1, steps), finished_reason="length", **vllm),
                     series("vllm:request_success_total", counter(0, steps), finished_reason="abort", **vllm)]
            rows += histogram("vllm:time_to_first_token_seconds", 2, 2.0, steps, **vllm)
            rows += histogram("vllm:e2e_request_latency_seconds", 2, 15.0, steps, **vllm)
            health = health_target(host, instance, port)
            rows += [series("probe_success", flat(1, steps), **health),
                     series("probe_http_status_code", flat(200, steps), **health),
                     series("up", flat(1, steps), **health)]
        npu = dict(job="npu", host=host, instance="%s:8082" % address)
        rows += [series("ascend_fleet_instance_restarts_total", flat(0, steps), vllm_instance=instance,
                        container_id="%012x" % port, **npu) for instance, port in INSTANCES]
        rows += [series("up", flat(1, steps), **npu),
                 series("npu_exporter_npu_smi_up", flat(1, steps), **npu),
                 series("npu_exporter_docker_up", flat(1, steps), **npu),
                 series("npu_exporter_collect_duration_seconds", flat(0.4, steps), **npu),
                 series("machine_npu_nums", flat(2, steps), **npu),
                 series("npu_driver_info", flat(1, steps), driver_version="24.1.rc2", firmware_version="7.5.0.1.129",
                        **npu)]
        for logic_id in range(2):
            labels = chip(host, logic_id)
            rows += [series("npu_chip_info_health_status", flat(1, steps), **labels),
                     series("npu_chip_info_temperature", flat(52 + logic_id, steps), **labels),
                     series("npu_chip_info_utilization", flat(63, steps), **labels),
                     series("npu_chip_info_used_memory", flat(21500, steps), **labels),
                     series("npu_chip_info_total_memory", flat(44280, steps), **labels)]
        rows += node_host(host, address, steps)
        for use, path, mountpoint in (("model", "/data/models", "/data"), ("cache", "/var/cache/vllm-ascend", "/"),
                                      ("docker", "/var/lib/docker", "/"), ("logs", "/var/log", "/")):
            rows.append(series("ascend_fleet_path_info", flat(1, steps), job="node", host=host,
                               instance="%s:9100" % address, path=path, use=use, mountpoint=mountpoint))
    gateway, address = GATEWAY
    rows += node_host(gateway, address, steps)
    rows += [series("up", flat(1, steps), job="gateway", host=gateway, instance="127.0.0.1:8405"),
             series("haproxy_backend_active_servers", flat(4, steps), job="gateway", host=gateway,
                    instance="127.0.0.1:8405", proxy=GATEWAY_BACKEND)]
    rows += [series("haproxy_server_status", flat(1, steps), job="gateway", host=gateway, instance="127.0.0.1:8405",
                    proxy=GATEWAY_BACKEND, server="%s:%s" % (host, instance))
             for host in HOSTS for instance, _ in INSTANCES]
    rows.append(series("up", flat(1, steps), job="prometheus", host="monitor-01", instance="127.0.0.1:9090"))
    return rows


def node_host(host, address, steps):
    node = dict(job="node", host=host, instance="%s:9100" % address)
    rows = [series("up", flat(1, steps), **node),
            series("node_memory_MemTotal_bytes", flat(512 * 2 ** 30, steps), **node),
            series("node_memory_MemAvailable_bytes", flat(380 * 2 ** 30, steps), **node)]
    for mountpoint, device, size, free in (("/", "/dev/sda2", 400e9, 250e9),
                                           ("/data", "/dev/nvme0n1p1", 3.8e12, 2.9e12)):
        disk = dict(node, mountpoint=mountpoint, device=device, fstype="ext4")
        rows += [series("node_filesystem_size_bytes", flat(size, steps), **disk),
                 series("node_filesystem_avail_bytes", flat(free, steps), **disk)]
    return rows


# --- promtool ---------------------------------------------------------------------------------------------------
def promtool():
    """The promtool of the virtualenv (scripts/dev installs it there from Debian's prometheus package): a test that
    needs it fails without it, for the rules are not checked otherwise."""
    path = venv_tool("promtool")
    if not os.access(path, os.X_OK):
        pytest.fail("promtool is missing at %s: `scripts/dev` installs it into .venv/bin (from the distribution's "
                    "prometheus package)" % path)
    return path


def run_promtool(*args):
    """promtool's exit code and what it printed."""
    done = subprocess.run([promtool()] + [str(arg) for arg in args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    return done.returncode, done.stdout
