"""Stand-in for the vllm-ascend 310P image's ``vllm`` command (twin only, never deployed to real hosts)."""
VERSION = "0.18.0rc1"
