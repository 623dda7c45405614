"""The monitoring role's alert rules (templates/alert_rules.yml.j2), rendered with the role's defaults as the template
module renders them: promtool accepts them, and `promtool test rules` runs each alert on synthetic series. Each
fires when it should and no sooner, and stays silent on what is no fault: a healthy fleet serving traffic, a
single failed scrape, flat memory or a one-time step of it, an idle instance, a short burst, a full disk that holds
none of the fleet's paths, planned replacements of an instance. promtool comes from scripts/dev, into .venv/bin."""
import re

import jinja2
import pytest
import yaml
from jinja2 import meta
from monitoring_queries import (
    BUCKETS,
    MODEL,
    ROLE,
    chip,
    counter,
    flat,
    health_target,
    healthy_fleet,
    histogram,
    is_contract_series,
    metric_names,
    run_promtool,
    series,
    vllm_target,
)

from conftest import GATEWAY_BACKEND, REPO

TEMPLATE = ROLE / "templates" / "alert_rules.yml.j2"
DEFAULTS = ROLE / "defaults" / "main.yml"
FLEET_VARS = REPO / "roles" / "fleet" / "vars" / "main.yml"

ALERTS = {
    "VllmInstanceDown": "critical", "VllmEngineDead": "critical", "VllmRestarting": "warning",
    "NpuChipUnhealthy": "critical", "NpuSmiFailing": "critical", "NpuCollectorDown": "critical",
    "NpuMemoryRising": "warning", "HostMemoryRising": "warning", "VllmProcessMemoryRising": "warning",
    "VllmTtftHigh": "warning", "VllmLatencyHigh": "warning", "VllmRequestsWaiting": "warning",
    "GatewayNoHealthyBackend": "critical", "DiskFilling": "warning", "ExporterDown": "critical",
}
FAULTS = ("VllmInstanceDown", "VllmEngineDead", "NpuChipUnhealthy", "NpuSmiFailing", "NpuCollectorDown",
          "GatewayNoHealthyBackend", "ExporterDown")
# Prometheus's evaluation interval and the targets' scrape interval the role sets: a fault alert must fire within
# two of them.
EVALUATION_S = 15
HOST = "npu-node-01"


# --- rendering ------------------------------------------------------------------------------------------------
def environment():
    """Jinja as the template module sets it: undefined variables fail, trim_blocks, the last newline kept."""
    return jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)


def used_variables():
    return meta.find_undeclared_variables(environment().parse(TEMPLATE.read_text()))


def defaults():
    """The role's defaults of the variables the template uses, each resolved as Ansible would when one names
    another ("{{ other }}")."""
    values = yaml.safe_load(DEFAULTS.read_text()) or {}
    resolved = {}
    for name in used_variables() & set(values):
        value = values[name]
        for _ in range(10):
            if not (isinstance(value, str) and "{{" in value):
                break
            value = yaml.safe_load(environment().from_string(value).render(values))
        resolved[name] = value
    return resolved


def fleet_values():
    """The fleet role's names the rules use (HAProxy's backend), from the fleet role's vars: names, no thresholds."""
    values = yaml.safe_load(FLEET_VARS.read_text())
    return {name: values[name] for name in used_variables() if name.startswith("fleet_")}


def render(values=None):
    values = dict(fleet_values(), **(defaults() if values is None else values))
    return environment().from_string(TEMPLATE.read_text()).render(values)


def rules(text=None):
    return yaml.safe_load(render() if text is None else text)["groups"][0]["rules"]


def without_annotations(text):
    """The rules with their annotations left out: the timing scenarios check when each alert fires, and promtool
    compares annotations too; test_annotations_name_what_fired checks them on their own."""
    document = yaml.safe_load(text)
    for rule in document["groups"][0]["rules"]:
        rule.pop("annotations", None)
    return yaml.safe_dump(document, sort_keys=False)


def seconds(duration):
    """A Prometheus duration (1h30m, 15s) in seconds."""
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration)
    assert parts and "".join(number + unit for number, unit in parts) == duration, duration
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(number) * unit[name] for number, name in parts)


def minutes(name):
    return seconds(defaults()[name]) // 60


def fired(alert, **labels):
    return dict(labels, severity=ALERTS[alert])


# --- promtool -------------------------------------------------------------------------------------------------
def promtool_test(tmp_path, text, interval_s, input_series, checks, evaluation_s=None):
    """Runs `promtool test rules` with the rules `text` on input_series sampled every interval_s, evaluated every
    evaluation_s (default: interval_s); checks: (eval time in seconds, alert, [the firing alerts: labels, or
    (labels, annotations)])."""
    (tmp_path / "rules.yml").write_text(text)
    tests = []
    for at, alert, alerts in checks:
        expected = []
        for entry in alerts:
            labels, annotations = entry if isinstance(entry, tuple) else (entry, None)
            expected.append(dict(exp_labels=labels, **({"exp_annotations": annotations} if annotations else {})))
        tests.append({"eval_time": "%ds" % at, "alertname": alert, "exp_alerts": expected})
    document = {"rule_files": ["rules.yml"], "evaluation_interval": "%ds" % (evaluation_s or interval_s),
                "tests": [{"interval": "%ds" % interval_s, "input_series": input_series, "alert_rule_test": tests}]}
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    code, shown = run_promtool("test", "rules", tmp_path / "rules_test.yml")
    assert code == 0, shown


# --- scenarios: each alert's synthetic series and when it fires ----------------------------------------------------
def vllm_instance(number, host=HOST):
    return vllm_target(host, "vllm-qwen3-vl-8b-%d" % number, 8000 + number)


def health(number, host=HOST):
    return health_target(host, "vllm-qwen3-vl-8b-%d" % number, 8000 + number)


def npu_target(number):
    return dict(job="npu", host="npu-node-%02d" % number, instance="192.0.2.%d:8082" % (10 + number))


def node_target(number):
    return dict(job="node", host="npu-node-%02d" % number, instance="192.0.2.%d:9100" % (10 + number))


def gateway_target(number):
    return dict(job="gateway", host="gateway-%02d" % number, instance="127.0.0.1:8405", proxy=GATEWAY_BACKEND)


# Per fault alert: its series, the labels of three targets of it (numbered 0, 1, 2) and its value when healthy.
FAULT_SERIES = {
    "VllmInstanceDown": ("up", vllm_instance, 1),
    "VllmEngineDead": ("probe_success", health, 1),
    "NpuChipUnhealthy": ("npu_chip_info_health_status", lambda number: chip(HOST, number), 1),
    "NpuSmiFailing": ("npu_exporter_npu_smi_up", lambda number: npu_target(number + 1), 1),
    "NpuCollectorDown": ("up", lambda number: npu_target(number + 1), 1),
    "GatewayNoHealthyBackend": ("haproxy_backend_active_servers", lambda number: gateway_target(number + 1), 2),
    "ExporterDown": ("up", lambda number: node_target(number + 1), 1),
}


def fault_scenario(alert):
    """Sampled and evaluated every 15 s: target 0 fails from 15 s on, target 1 stays healthy, target 2 fails one
    scrape only (at 15 s). Seen at 15 s, the fault fires at the next evaluation, 30 s."""
    name, target, healthy = FAULT_SERIES[alert]
    steps = 10
    input_series = [series(name, "%d 0x%d" % (healthy, steps - 1), **target(0)),
                    series(name, flat(healthy, steps), **target(1)),
                    series(name, "%d 0 %d" % (healthy, healthy) + " %d" % healthy * (steps - 2), **target(2))]
    checks = [(0, alert, []), (15, alert, []), (30, alert, [fired(alert, **target(0))]),
              (60, alert, [fired(alert, **target(0))])]
    return EVALUATION_S, input_series, checks


def container_restarts(number, container_id, first, last, restarts=(), count=0):
    """The NPU collector's restart count of one container of instance `number` (on HOST), every minute: absent before
    minute `first`, `count` then, one more from each minute of `restarts` on (a restart Docker made since the last
    reading), up to minute `last`. A container that a replacement removed is no longer listed: its series ends with
    a stale marker, as Prometheus writes one."""
    values = ["_"] * first + [repr(float(count + len([minute for minute in restarts if minute <= at])))
                              for at in range(first, last + 1)]
    return series("ascend_fleet_instance_restarts_total", " ".join(values + ["stale"]), container_id=container_id,
                  vllm_instance=vllm_instance(number)["vllm_instance"], **npu_target(1))


def process_starts(number, starts, total):
    """vLLM's own process_start_time_seconds of instance `number`, a new value from each minute of `starts` on."""
    values = [repr(1.7e9 + 60 * max([start for start in starts if start <= minute] or [0])) for minute in range(total)]
    return series("process_start_time_seconds", " ".join(values), **vllm_instance(number))


def restarts_scenario(alert):
    """Every minute, the NPU collector's series of each container of seven instances on HOST (window W minutes,
    monitoring_restarts_max M):
    0 restarts M+1 times, 5 minutes apart from minute 10 (a crash loop): fires once the last one is seen, until the
      first one leaves the window.
    1 restarts M times: as many as allowed, never fires.
    2 is replaced M+2 times, 5 minutes apart (a layout change, canary rolls, a new image), each replacement a new
      container counting from 0: never fires, though its vLLM process started M+3 times (the starts' old count).
    3 is first read at minute 5 with M+1 restarts from before (a collector new on the host), then replaced at 20:
      never fires.
    4 is replaced at minute 30, and the new container restarts M+1 times, 2 minutes apart: fires, from the last one.
    5 is a canary rolled back: a new container from minute 10 to 20, the old one (2 restarts long ago, still listed
      while set aside) serving again: never fires.
    6 has no such series (its host's collector is older, or not scraped yet) though its process started M+3 times:
      never fires, and the rule evaluates without error."""
    window, most = minutes("monitoring_restarts_window"), int(defaults()["monitoring_restarts_max"])
    looping = [10 + 5 * number for number in range(most + 1)]
    replaced = [10 + 5 * number for number in range(most + 2)]
    after_replacement = [32 + 2 * number for number in range(most + 1)]
    total = after_replacement[0] + window + 10
    input_series = [container_restarts(0, "0a0a0a0a0a0a", 0, total, looping),
                    container_restarts(1, "1b1b1b1b1b1b", 0, total, looping[:most]),
                    process_starts(2, replaced, total), process_starts(6, replaced, total),
                    series("up", flat(1, total), **vllm_instance(6)),
                    container_restarts(3, "3d3d3d3d3d3d", 5, 19, count=most + 1),
                    container_restarts(3, "3e3e3e3e3e3e", 20, total),
                    container_restarts(4, "4f4f4f4f4f4f", 0, 29),
                    container_restarts(4, "404040404040", 30, total, after_replacement),
                    container_restarts(5, "515151515151", 0, total, count=2),
                    container_restarts(5, "525252525252", 10, 20)]
    starts = [0] + replaced
    input_series += [container_restarts(2, "2c2c2c2c2c%02d" % number, first, last - 1)
                     for number, (first, last) in enumerate(zip(starts, replaced + [total + 1]))]

    def firing(minute):
        # A restart leaves the window W minutes after the reading before it; at W - 1 after the restart itself, the
        # reading before it lies on the window's edge, which Prometheus 2 counts in and Prometheus 3 out: unchecked.
        return [fired(alert, host=HOST, vllm_instance=vllm_instance(number)["vllm_instance"])
                for number, restarts in ((0, looping), (4, after_replacement))
                if restarts[-1] <= minute < restarts[0] + window - 1]
    edges = {restarts[0] + window - 1 for restarts in (looping, after_replacement)}
    times = set(range(0, total + 1, 5)) | {looping[-1] - 1, looping[-1], after_replacement[-1] - 1,
                                           after_replacement[-1]}
    times |= {edge + step for edge in edges for step in (-1, 1)}
    checks = [(60 * minute, alert, firing(minute)) for minute in sorted(times - edges)]
    return 60, input_series, checks


# Per leak alert: its series, the labels of four of its targets, its healthy value, the threshold variable (per
# hour) and +1 when it rises, -1 when it falls.
LEAKS = {
    "NpuMemoryRising": ("npu_chip_info_used_memory", lambda number: chip(HOST, number), 21500,
                        "monitoring_npu_memory_rise_mb_per_hour", 1),
    "HostMemoryRising": ("node_memory_MemAvailable_bytes", lambda number: node_target(number + 1), 380 * 2 ** 30,
                         "monitoring_host_memory_rise_bytes_per_hour", -1),
    "VllmProcessMemoryRising": ("process_resident_memory_bytes", vllm_instance, 3.2e9,
                                "monitoring_vllm_rss_rise_bytes_per_hour", 1),
}


def leak_scenario(alert):
    """Every minute: target 0 leaks at three times the threshold from the start, target 1 is flat, target 2 leaks at
    half the threshold, target 3 steps once at 10 minutes (a model loading) by 40 times the threshold. Only target 0
    fires, monitoring_leak_for after its slope is first seen (at 1 minute, the second sample)."""
    name, target, start, threshold, sign = LEAKS[alert]
    per_hour = float(defaults()[threshold])
    hold, window = minutes("monitoring_leak_for"), minutes("monitoring_leak_window")
    total = hold + window + 30
    input_series = [series(name, counter(sign * 3 * per_hour / 60, total, start), **target(0)),
                    series(name, flat(start, total), **target(1)),
                    series(name, counter(sign * per_hour / 2 / 60, total, start), **target(2)),
                    series(name, "%s %s" % (flat(start, 9), flat(start + sign * 40 * per_hour, total - 10)),
                           **target(3))]
    firing = [fired(alert, **target(0))]
    times = sorted(set(list(range(0, total + 1, 10)) + [hold, hold + 1, 10 + window - 1, 10 + window]))
    checks = [(60 * minute, alert, firing if minute >= 1 + hold else []) for minute in times]
    return 60, input_series, checks


LATENCY = {"VllmTtftHigh": ("vllm:time_to_first_token_seconds", "monitoring_ttft_p99_seconds"),
           "VllmLatencyHigh": ("vllm:e2e_request_latency_seconds", "monitoring_e2e_p99_seconds")}


def latency_scenario(alert):
    """Every minute, four instances: 0 serves every request more slowly than the target (in the bucket above it),
    1 as fast as half the target, 2 nothing (idle: its quantile is NaN), 3 slowly but fewer requests than
    monitoring_latency_min_requests in the window. Only 0 fires, monitoring_latency_for after its first minute."""
    name, target = LATENCY[alert]
    slowest = float(defaults()[target])
    bounds = BUCKETS[name]
    above = [bound for bound in bounds if bound >= slowest]
    assert len(above) >= 2, "no bucket of %s lies above %s s" % (name, slowest)
    slow, fast = above[1], max([bound for bound in bounds if bound <= slowest / 2] or bounds[:1])
    least, window = int(defaults()["monitoring_latency_min_requests"]), minutes("monitoring_latency_window")
    hold = minutes("monitoring_latency_for")
    total = hold + window + 10
    # Enough requests that the first minute alone holds the minimum, so the slow instance is seen from then on.
    busy = 2 * max(least, 1)
    input_series = []
    for number, (per_minute, latency) in enumerate([(busy, slow), (busy, fast), (0, slow),
                                                    (least / 2 / window, slow)]):
        input_series += histogram(name, per_minute, latency, total, engine="0", model_name=MODEL,
                                  **vllm_instance(number))
    labels = vllm_instance(0)
    firing = [fired(alert, host=labels["host"], vllm_instance=labels["vllm_instance"], model_name=MODEL)]
    times = sorted(set(list(range(0, total + 1, 5)) + [hold, hold + 1]))
    checks = [(60 * minute, alert, firing if minute >= 1 + hold else []) for minute in times]
    return 60, input_series, checks


def waiting_scenario(alert):
    """Every minute: instance 0 has more requests waiting than the threshold from the first minute on, instance 1 as
    many for one minute less than monitoring_waiting_for (a burst), instance 2 exactly the threshold."""
    most, hold = int(defaults()["monitoring_waiting_requests"]), minutes("monitoring_waiting_for")
    total = hold + 10
    vllm = dict(engine="0", model_name=MODEL)
    input_series = [
        series("vllm:num_requests_waiting", "0 %s" % flat(most + 1, total - 1), **vllm, **vllm_instance(0)),
        series("vllm:num_requests_waiting", "0 %s %s" % (flat(most + 5, hold - 2), flat(0, total - hold)),
               **vllm, **vllm_instance(1)),
        series("vllm:num_requests_waiting", flat(most, total), **vllm, **vllm_instance(2))]
    firing = [fired(alert, **vllm, **vllm_instance(0))]
    checks = [(60 * minute, alert, firing if minute >= 1 + hold else []) for minute in range(total + 1)]
    return 60, input_series, checks


def disk_rows(steps, ratio):
    """npu-node-01: / half free with the logs and Docker's data; /data with the model and the cache below the ratio;
    /mnt/scratch nearly full and holding none of the fleet's paths. npu-node-02: /data below the ratio too, but its
    fleet's paths all on /. Only npu-node-01's /data fills a fleet path's disk."""
    rows = []
    for number, disks, paths in (
            (1, (("/", 0.5), ("/data", ratio / 2), ("/mnt/scratch", 0.01)),
             (("logs", "/var/log", "/"), ("docker", "/var/lib/docker", "/"), ("model", "/data/models", "/data"),
              ("cache", "/data/cache", "/data"))),
            (2, (("/", 0.4), ("/data", ratio / 4)),
             (("logs", "/var/log", "/"), ("model", "/srv/models", "/"), ("cache", "/var/cache/vllm-ascend", "/")))):
        node = node_target(number)
        for index, (mountpoint, free) in enumerate(disks):
            disk = dict(node, mountpoint=mountpoint, device="/dev/sd%s1" % "abc"[index], fstype="ext4")
            rows += [series("node_filesystem_size_bytes", flat(1e12, steps), **disk),
                     series("node_filesystem_avail_bytes", flat(1e12 * free, steps), **disk)]
        rows += [series("ascend_fleet_path_info", flat(1, steps), path=path, use=use, mountpoint=mountpoint, **node)
                 for use, path, mountpoint in paths]
    return rows


FILLING_DISK = dict(node_target(1), mountpoint="/data", device="/dev/sdb1", fstype="ext4")


def disk_scenario(alert):
    hold = minutes("monitoring_disk_for")
    total = hold + 5
    firing = [fired(alert, **FILLING_DISK)]
    checks = [(60 * minute, alert, firing if minute >= hold else []) for minute in range(total + 1)]
    return 60, disk_rows(total, float(defaults()["monitoring_disk_free_ratio"])), checks


SCENARIOS = dict([(alert, fault_scenario) for alert in FAULTS] + [(alert, leak_scenario) for alert in LEAKS]
                 + [(alert, latency_scenario) for alert in LATENCY]
                 + [("VllmRestarting", restarts_scenario), ("VllmRequestsWaiting", waiting_scenario),
                    ("DiskFilling", disk_scenario)])


# --- the rules as promtool reads them ----------------------------------------------------------------------------
def test_promtool_accepts_the_rendered_rules(tmp_path):
    (tmp_path / "rules.yml").write_text(render())
    code, shown = run_promtool("check", "rules", tmp_path / "rules.yml")
    assert code == 0, shown
    assert "SUCCESS: %d rules found" % len(ALERTS) in shown


def test_the_rules_are_one_group_of_the_fleets_alerts():
    document = yaml.safe_load(render())
    assert [group["name"] for group in document["groups"]] == ["ascend-fleet"]
    assert sorted(rule["alert"] for rule in rules()) == sorted(ALERTS)


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule["alert"])
def test_every_alert_says_how_bad_what_and_where(rule):
    """severity, and a summary and description naming the host, and the instance or chip where the series has one."""
    assert rule["labels"] == {"severity": ALERTS[rule["alert"]]}
    annotations = rule["annotations"]
    assert sorted(annotations) == ["description", "summary"]
    for text in annotations.values():
        assert "{{ $labels.host }}" in text and "{%" not in text
    named = annotations["summary"] + annotations["description"]
    if re.search(r'job="vllm', rule["expr"]):
        assert "{{ $labels.vllm_instance }}" in named
    if "npu_chip_info" in rule["expr"]:
        assert "{{ $labels.id }}" in named
    # The gateway runs on no Ascend host, waiting requests ask for capacity, not a diagnosis, and an exporter's
    # service is not what the doctor reads.
    if rule["alert"] not in ("GatewayNoHealthyBackend", "VllmRequestsWaiting", "ExporterDown"):
        assert "ascend-vllm-fleet doctor --limit {{ $labels.host }}" in named or (
            "ascend-vllm-fleet collect --limit {{ $labels.host }}" in named)


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule["alert"])
def test_every_alert_reads_the_contracts_series(rule):
    names = metric_names(rule["expr"])
    assert names and sorted(name for name in names if not is_contract_series(name)) == []


def test_the_fault_alerts_fire_at_the_next_evaluation():
    """The fault scenarios sample and evaluate every EVALUATION_S, as the role has Prometheus do."""
    raw = yaml.safe_load(DEFAULTS.read_text())
    assert seconds(raw["monitoring_scrape_interval"]) == seconds(raw["monitoring_evaluation_interval"]) == EVALUATION_S
    fault_for = defaults()["monitoring_fault_for"]
    assert seconds(fault_for) <= EVALUATION_S
    for rule in rules():
        assert ("for" in rule and rule["for"] == fault_for) == (rule["alert"] in FAULTS), rule["alert"]


def test_the_leak_alerts_hold_longer_than_their_window():
    """A one-time step (a model loading its weights) tilts the fitted line for one window only."""
    values = defaults()
    assert seconds(values["monitoring_leak_for"]) > seconds(values["monitoring_leak_window"])


# --- the variables ------------------------------------------------------------------------------------------------
def test_every_variable_the_rules_use_has_a_default():
    """The role's own settings, and the fleet role's names (the gateway's backend) that the gateway uses too."""
    values = dict(yaml.safe_load(DEFAULTS.read_text()) or {}, **yaml.safe_load(FLEET_VARS.read_text()))
    used = used_variables()
    assert sorted(name for name in used if not name.startswith(("monitoring_", "fleet_"))) == []
    assert sorted(used - set(values)) == []


def test_every_threshold_window_and_for_is_a_variable():
    """Rendered with a distinct value per variable, each value shows up, and the rules hold no other number than
    0 (a fault's up == 0), 0.99 (the quantile) and 3600 (seconds per hour)."""
    sentinels = {}
    for number, (name, value) in enumerate(sorted(defaults().items())):
        sentinels[name] = "%ds" % (7001 + number) if isinstance(value, str) else 9001 + number + 0.5
    text = render(sentinels)
    assert sorted(name for name, value in sentinels.items() if str(value) not in text) == []
    for rule in rules(text):
        expr = rule["expr"]
        for value in sentinels.values():
            expr = expr.replace(str(value), " ")
        literals = re.findall(r"(?<![\w.:])\d+(?:\.\d+)?(?:e[+-]?\d+)?", expr)
        assert sorted(set(literals) - {"0", "0.99", "3600"}) == [], rule["alert"]
        assert "for" not in rule or rule["for"] in [str(value) for value in sentinels.values()], rule["alert"]


def test_values_given_as_text_render_the_same():
    """-e monitoring_disk_free_ratio=0.05 on the command line gives the template a string, not a number."""
    assert render({name: str(value) for name, value in defaults().items()}) == render()


# --- when each alert fires --------------------------------------------------------------------------------------
def test_every_alert_has_a_scenario_that_fires_it_and_one_that_does_not():
    assert sorted(SCENARIOS) == sorted(ALERTS)
    for alert, scenario in SCENARIOS.items():
        checks = scenario(alert)[2]
        assert any(alerts for _, _, alerts in checks) and any(not alerts for _, _, alerts in checks), alert


@pytest.mark.parametrize("alert", sorted(SCENARIOS))
def test_each_alert_fires_exactly_when_it_should(alert, tmp_path):
    interval_s, input_series, checks = SCENARIOS[alert](alert)
    promtool_test(tmp_path, without_annotations(render()), interval_s, input_series, checks)


def test_restarts_are_counted_whole_between_readings(tmp_path):
    """Prometheus evaluates between the collector's readings, and increase() stretches what it read to the end of
    the window: exactly monitoring_restarts_max restarts still fire nothing, one more fires from the evaluation that
    reads it. Read every minute, evaluated every 15 s; restarts 5 minutes apart from minute 10."""
    most = int(defaults()["monitoring_restarts_max"])
    restarts = [10 + 5 * number for number in range(most + 1)]
    total = restarts[-1] + 10
    input_series = [container_restarts(0, "0a0a0a0a0a0a", 0, total, restarts[:most]),
                    container_restarts(1, "1b1b1b1b1b1b", 0, total, restarts)]
    looping = [fired("VllmRestarting", host=HOST, vllm_instance=vllm_instance(1)["vllm_instance"])]
    checks = [(at, "VllmRestarting", looping if at >= 60 * restarts[-1] else [])
              for at in range(0, 60 * total + 1, EVALUATION_S)]
    promtool_test(tmp_path, without_annotations(render()), 60, input_series, checks, evaluation_s=EVALUATION_S)


def test_a_healthy_fleet_serving_traffic_fires_nothing(tmp_path):
    """Hours of a healthy fleet, long enough for every window and `for` to have passed."""
    values = defaults()
    longest = max(seconds(value) for name, value in values.items() if isinstance(value, str)) // 60
    total = 2 * longest + 30
    checks = [(60 * minute, alert, []) for minute in range(0, total + 1, 15) for alert in ALERTS]
    promtool_test(tmp_path, without_annotations(render()), 60, healthy_fleet(total), checks)


# --- what the alerts say ------------------------------------------------------------------------------------------
def test_annotations_name_what_fired(tmp_path):
    """The annotations as Prometheus expands them: the labels, the probe's status code, the fleet's paths on the
    disk, read by queries from the description's template, and the gateway's backend, which Jinja writes in."""
    ratio = float(defaults()["monitoring_disk_free_ratio"])
    hold = seconds(defaults()["monitoring_disk_for"])
    steps = hold // EVALUATION_S + 4
    dead, gone, bad_chip, gateway = health(0), health(1), chip(HOST, 3), gateway_target(1)
    input_series = [series("haproxy_backend_active_servers", "2 0x%d" % steps, **gateway),
                    series("probe_success", "1 0x%d" % steps, **dead),
                    series("probe_http_status_code", "200 503x%d" % steps, **dead),
                    series("probe_success", "1 0x%d" % steps, **gone),
                    series("probe_http_status_code", "200 0x%d" % steps, **gone),
                    series("npu_chip_info_health_status", "1 0x%d" % steps, **bad_chip)]
    input_series += disk_rows(steps, ratio)
    engine_dead = (
        "%s answered HTTP %s (503: the engine of %s is dead; 0: no answer, the process is gone or hung). Its requests "
        "fail until Docker restarts it and the model loads again. Run `ascend-vllm-fleet doctor --limit npu-node-01` "
        "for the log lines that name the cause.")
    checks = [
        (30, "VllmEngineDead", [
            (fired("VllmEngineDead", **labels), {
                "summary": "vLLM instance %s on npu-node-01 fails its /health check" % labels["vllm_instance"],
                "description": engine_dead % (labels["instance"], status, labels["vllm_instance"])})
            for labels, status in ((dead, 503), (gone, 0))]),
        (30, "NpuChipUnhealthy", [(fired("NpuChipUnhealthy", **bad_chip), {
            "summary": "NPU chip 3 on npu-node-01 is not healthy",
            "description": "npu-smi reports chip 3 (NPU 2 chip 1, PCIe 0000:04:00.0) of npu-node-01 not OK; "
                           "the instance on it fails or soon will. Read `npu-smi info -t health -i 2 -c 1` and dmesg "
                           "there, and run `ascend-vllm-fleet doctor --limit npu-node-01`; reset or replace the card, "
                           "or leave it out (ascend_preflight_unhealthy_chip_action: exclude_card) and deploy again."
        })]),
        (30, "GatewayNoHealthyBackend", [(fired("GatewayNoHealthyBackend", **gateway), {
            "summary": "The gateway on gateway-01 has no healthy vLLM instance",
            "description": "HAProxy on gateway-01 has no active server left in backend %s: every request to the "
                           "fleet's endpoint there fails with 503. Every instance is down or fails /health; see the "
                           "VllmInstanceDown and VllmEngineDead alerts and run `ascend-vllm-fleet doctor`."
                           % GATEWAY_BACKEND})]),
        (hold + EVALUATION_S, "DiskFilling", [(fired("DiskFilling", **FILLING_DISK), {
            "summary": "/data on npu-node-01 has %s free" % percentage(ratio / 2),
            "description": "The file system /data (/dev/sdb1) on npu-node-01 holds /data/cache (cache), "
                           "/data/models (model) and has %s free, under %s%%. A full disk stops image pulls, model "
                           "downloads and logs. Free space (docker image prune, old logs) or move the path; "
                           "`ascend-vllm-fleet doctor --limit npu-node-01` shows each path's disk."
                           % (percentage(ratio / 2), "%g" % (ratio * 100))})]),
    ]
    promtool_test(tmp_path, render(), EVALUATION_S, input_series, checks)


def test_the_restart_alert_says_how_many_restarts_nobody_planned(tmp_path):
    """A planned replacement, then a crash loop in the new container: the alert counts the crash loop's restarts
    only, as a whole number, and says the window."""
    most = int(defaults()["monitoring_restarts_max"])
    restarts = [12 + number for number in range(most + 1)]
    input_series = [container_restarts(0, "0a0a0a0a0a0a", 0, 9, count=1),
                    container_restarts(0, "0b0b0b0b0b0b", 10, 20, restarts)]
    name = vllm_instance(0)["vllm_instance"]
    checks = [(60 * restarts[-1] + 30, "VllmRestarting", [(fired("VllmRestarting", host=HOST, vllm_instance=name), {
        "summary": "vLLM instance %s on npu-node-01 crashed and was restarted %d times" % (name, most + 1),
        "description": "Docker restarted %s on npu-node-01 %d times within the last %s after it exited on its own "
                       "(planned replacements and starts by hand are not counted): it crashes, and loads the model "
                       "again each time. Run `ascend-vllm-fleet doctor --limit npu-node-01`: its log excerpt names "
                       "why (a large image, NPU memory, a dead engine)."
                       % (name, most + 1, defaults()["monitoring_restarts_window"])})])]
    promtool_test(tmp_path, render(), 60, input_series, checks, evaluation_s=EVALUATION_S)


def percentage(share):
    """Prometheus's humanizePercentage: four significant digits."""
    return "%s%%" % ("%.4g" % (share * 100))

