"""The monitoring role's Grafana dashboards (templates/dashboards/*.json.j2, as the role renders them): stable uids,
a Prometheus chosen by the `datasource` variable in every panel and query, host and instance variables that can
show all, and queries that Prometheus parses, that read only the contract's series and that return data on a
healthy fleet serving traffic (so no panel stays empty until something breaks). promtool comes from scripts/dev,
into .venv/bin."""
import re

import pytest
import yaml
from monitoring_queries import (
    INTERVALS,
    ROLE,
    VARIABLE,
    dashboard_names,
    dashboard_queries,
    healthy_fleet,
    is_contract_series,
    load,
    metric_names,
    panels,
    run_promtool,
    template_variables,
    variable_queries,
)

UIDS = {"ascend-fleet.json": "ascend-fleet", "ascend-instance.json": "ascend-instance", "ascend-npu.json": "ascend-npu"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What each dashboard is for: the series it must show.
SHOWS = {
    "ascend-fleet": {"up", "probe_success", "vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                     "vllm:e2e_request_latency_seconds_bucket", "haproxy_backend_active_servers",
                     "npu_chip_info_health_status", "npu_chip_info_temperature", "node_memory_MemAvailable_bytes"},
    "ascend-instance": {"vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                        "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
                        "vllm:kv_cache_usage_perc", "process_resident_memory_bytes", "process_start_time_seconds",
                        "vllm:request_success_total"},
    "ascend-npu": {"npu_chip_info_health_status", "npu_chip_info_temperature", "npu_chip_info_utilization",
                   "npu_chip_info_used_memory", "npu_chip_info_total_memory", "npu_driver_info",
                   "npu_exporter_npu_smi_up"},
}


def dashboards():
    return {name: load(name) for name in dashboard_names()}


def query_panels(dashboard):
    return [panel for panel in panels(dashboard) if panel.get("type") != "row"]


def raw_exprs(dashboard):
    return [target["expr"] for panel in query_panels(dashboard) for target in panel.get("targets", [])]


def test_the_role_ships_the_dashboards_it_names():
    named = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["monitoring_dashboards"]
    assert sorted(named) == sorted(dashboards()) == sorted(UIDS)


@pytest.mark.parametrize("name", sorted(UIDS))
def test_each_dashboard_has_its_stable_uid(name):
    dashboard = load(name)
    assert dashboard["schemaVersion"] == 39
    # Links and provisioning find a dashboard by its uid; Grafana gives it its own id.
    assert dashboard["uid"] == UIDS[name] and len(dashboard["uid"]) <= 40
    assert dashboard.get("id") is None
    assert dashboard["title"] and dashboard["description"]


def test_no_two_dashboards_share_a_uid_or_a_title():
    loaded = dashboards().values()
    assert len({dashboard["uid"] for dashboard in loaded}) == len({dashboard["title"] for dashboard in loaded}) == (
        len(UIDS))


@pytest.mark.parametrize("name", sorted(UIDS))
def test_the_variables_choose_the_prometheus_and_can_show_all(name):
    dashboard = load(name)
    variables = template_variables(dashboard)
    assert {key: variables["datasource"][key] for key in ("type", "query")} == {"type": "datasource",
                                                                                  "query": "prometheus"}
    expected = {"host"} | ({"vllm_instance"} if any("vllm" in expr for expr in raw_exprs(dashboard)) else set())
    assert expected <= set(variables)
    for variable in variables.values():
        if variable["name"] == "datasource":
            continue
        assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
        assert (variable["multi"], variable["includeAll"], variable["allValue"]) == (True, True, ".*")
        assert variable["definition"].startswith("label_values(")
    used = {match.group(1) or match.group(2) for expr in raw_exprs(dashboard) for match in VARIABLE.finditer(expr)}
    assert sorted(used - set(variables) - set(INTERVALS)) == []
    assert {"host"} <= used


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_panel_and_query_reads_the_chosen_prometheus(name):
    dashboard = load(name)
    ids = [panel["id"] for panel in panels(dashboard)]
    assert all(isinstance(number, int) for number in ids) and len(ids) == len(set(ids))
    for panel in panels(dashboard):
        if panel["type"] == "row":
            assert panel.get("targets", []) == []
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        targets = panel["targets"]
        assert targets and all(target["datasource"] == DATASOURCE and target["expr"].strip() for target in targets)
        assert len({target["refId"] for target in targets}) == len(targets), panel["title"]


@pytest.mark.parametrize("name", sorted(UIDS))
def test_no_two_panels_overlap(name):
    taken = {}
    for panel in panels(load(name)):
        place = panel["gridPos"]
        assert place["x"] + place["w"] <= 24, panel["title"]
        for x in range(place["x"], place["x"] + place["w"]):
            for y in range(place["y"], place["y"] + place["h"]):
                assert (x, y) not in taken, "%s overlaps %s" % (panel["title"], taken[(x, y)])
                taken[(x, y)] = panel["title"]


@pytest.mark.parametrize("name", sorted(UIDS))
def test_each_dashboard_shows_what_it_is_for(name):
    dashboard = load(name)
    shown = set()
    for uid, _, expr in dashboard_queries():
        if uid == dashboard["uid"]:
            shown |= metric_names(expr)
    assert sorted(SHOWS[dashboard["uid"]] - shown) == []


def test_the_npu_dashboard_has_no_power_panel_and_says_why():
    dashboard = load("ascend-npu.json")
    assert "power" in dashboard["description"] and "NA" in dashboard["description"]
    assert not any("npu_chip_info_power" in expr for _, _, expr in dashboard_queries())


def test_the_queries_are_rewritten_for_prometheus():
    queries = dashboard_queries()
    assert len(queries) == sum(len(raw_exprs(dashboard)) for dashboard in dashboards().values())
    for uid, title, expr in queries + [(uid, name, expr) for uid, name, expr in variable_queries()]:
        assert "$" not in expr, (uid, title, expr)


def test_every_query_reads_the_contracts_series():
    for uid, title, expr in dashboard_queries() + variable_queries():
        names = metric_names(expr)
        assert names and sorted(name for name in names if not is_contract_series(name)) == [], (uid, title, expr)


def test_every_query_parses(tmp_path):
    """promtool (2.42) checks no bare expression: each one is checked as a recording rule."""
    queries = dashboard_queries() + variable_queries()
    groups = [{"name": "dashboards", "rules": [{"record": "dashboard:query_%d" % number, "expr": expr}
                                               for number, (_, _, expr) in enumerate(queries)]}]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    code, shown = run_promtool("check", "rules", tmp_path / "queries.yml")
    assert code == 0, shown
    assert "SUCCESS: %d rules found" % len(queries) in shown


def test_every_query_returns_data_on_a_healthy_fleet(tmp_path):
    """Ten minutes of a healthy fleet serving traffic: an alert on absent(query) per query fires for none. A query
    empty when all is well (a `== 0` filter without `or vector(0)`) would show "No data" instead of 0."""
    queries = dashboard_queries() + variable_queries()
    names = {"Query%d" % number: query for number, query in enumerate(queries)}
    rules = [{"alert": name, "expr": "absent(%s)" % expr} for name, (_, _, expr) in names.items()]
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    test = {"rule_files": ["queries.yml"], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": healthy_fleet(60),
                       "alert_rule_test": [{"eval_time": "10m", "alertname": name, "exp_alerts": []}
                                           for name in names]}]}
    (tmp_path / "queries_test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    code, shown = run_promtool("test", "rules", tmp_path / "queries_test.yml")
    empty = sorted(set(re.findall(r"alertname: (Query\d+)", shown)), key=lambda name: int(name[5:]))
    assert (code, [names[name] for name in empty]) == (0, []), shown[-2000:]
