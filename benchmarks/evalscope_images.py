"""`evalscope perf` with a data set of given chat messages, so that it sends the very images the vllm_benchmark
module sends; benchmarks/accuracy.py runs it with the Python of benchmarks/.venv-evalscope.

Usage: python benchmarks/evalscope_images.py <evalscope perf arguments> --dataset fleet_messages
       --dataset-path FILE
FILE holds one request's messages a line, as a JSON list.
"""
import json
import sys

from evalscope.cli.cli import run_cmd
from evalscope.perf.plugin.datasets.base import DatasetPluginBase
from evalscope.perf.plugin.registry import register_dataset


@register_dataset("fleet_messages")
class FleetMessages(DatasetPluginBase):
    """The messages of each request, read in turn from --dataset-path."""

    def build_messages(self):
        with open(self.query_parameters.dataset_path, encoding="utf-8") as handle:
            for line in handle:
                yield json.loads(line)


if __name__ == "__main__":
    sys.argv[0] = "evalscope"
    run_cmd()
