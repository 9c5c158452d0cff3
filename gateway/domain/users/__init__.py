"""The users domain."""
