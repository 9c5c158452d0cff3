"""Enclave's inference engine and worker: a standalone, vLLM-class engine in torch."""

__version__ = "0.1.0"
