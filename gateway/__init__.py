"""Enclave's gateway: SSO, API keys, limits, audit, and the OpenAI-compatible proxy."""

__version__ = "0.1.0"
