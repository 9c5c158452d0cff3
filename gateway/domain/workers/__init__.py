"""The workers domain: the upstream pool, its health checks and routing, and the embedded
worker the gateway supervises."""
