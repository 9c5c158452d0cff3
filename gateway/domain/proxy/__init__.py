"""The OpenAI-compatible API: admit, forward to a worker, account, and write it down."""
