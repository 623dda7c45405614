"""Stand-in for the vllm-ascend 310P image's ``vllm`` command (twin only, never deployed to real hosts)."""
VERSION = "0.18.0rc1"
# The vLLM the v0.18.0rc1 image is built on: what its /version answers.
VLLM_VERSION = "0.18.0"
