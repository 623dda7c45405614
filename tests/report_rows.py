"""Hand-made benchmark results for the tests of the report: a group's record as the load test writes it
(group), and an instance's results file under a report folder's raw/<host>/ (write)."""
import json


def group(size, tokens, concurrency, p95, throughput, unreliable=False):
    return {"image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": 8, "completed": 8,
            "failed": 0, "error_rate": 0.0, "unreliable": unreliable, "errors": {}, "p95_latency_s": p95,
            "p95_ttft_s": p95 / 4, "rps": throughput / 1000.0, "total_tokens_per_s": throughput,
            "output_tokens_per_s": throughput / 10.0}


def write(report_dir, host, instance, groups):
    folder = report_dir / "raw" / host
    folder.mkdir(parents=True, exist_ok=True)
    (folder / (instance + ".jsonl")).write_text("".join(json.dumps(g) + "\n" for g in groups))
