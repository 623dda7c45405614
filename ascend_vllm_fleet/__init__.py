"""ascend-vllm-fleet controller-side tools: the benchmark report (and the CLI)."""
