"""The ansible-runner events a bench run emits up to its follow step, on a per_card host (npu-a, four
instances) and a single-instance host (npu-b), for the tests of the command and its view."""

A, B = "npu-a", "npu-b"
INSTANCES = {A: ["vllm-ascend-npu1", "vllm-ascend-npu2", "vllm-ascend-npu4", "vllm-ascend-npu5"], B: ["vllm-ascend"]}


def task_start(host, task, action, role="vllm_bench"):
    return [{"event": "playbook_on_task_start", "event_data": {"task": task, "role": role}},
            {"event": "runner_on_start", "event_data": {"host": host, "task": task, "role": role,
                                                        "task_action": action, "resolved_action": action}}]


def planned(host, name, port):
    """A runner_item_on_ok of the plan task, as ansible-runner records it (res trimmed to what a reader uses)."""
    return {"event": "runner_item_on_ok", "event_data": {
        "host": host, "task": "Plan the benchmark of every instance", "role": "vllm_bench",
        "task_action": "ascend.fleet.vllm_benchmark", "resolved_action": "ascend.fleet.vllm_benchmark",
        "res": {"changed": False, "item": {"name": name, "port": port}, "planned_groups": 4, "planned_requests": 16,
                "estimated_seconds": 38.9, "stopped_by_deadline": False, "groups": [],
                "_ansible_item_label": name}}}


# What a bench run emits up to its follow step: both hosts plan their instances, then show the plan.
BENCH_EVENTS = (task_start(A, "Plan the benchmark of every instance", "ascend.fleet.vllm_benchmark")
                + task_start(B, "Plan the benchmark of every instance", "ascend.fleet.vllm_benchmark")
                + [planned(A, name, 8000 + index) for index, name in enumerate(INSTANCES[A])]
                + [planned(B, INSTANCES[B][0], 8000)]
                + task_start(A, "Show the plan (groups, requests and the module's estimate of the time)",
                             "ansible.builtin.debug")
                + task_start(A, "Follow the benchmarks until every instance's run has ended", "vllm_bench_follow")
                + task_start(B, "Follow the benchmarks until every instance's run has ended", "vllm_bench_follow"))
