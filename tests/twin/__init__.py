"""The twin: a simulated Ascend 310P host built from real parts (see lifecycle.py)."""
