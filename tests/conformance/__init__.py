"""The stand-in held to vLLM 0.18's own API server: the same requests, compared answer by answer."""
