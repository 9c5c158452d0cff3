"""`enclave bench ...`: measurements of the gateway, printed as JSON."""
