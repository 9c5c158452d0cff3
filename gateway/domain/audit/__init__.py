"""The audit log: one hash-chained record per API request, written off the request path."""
