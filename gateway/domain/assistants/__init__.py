"""Department assistants: a department's shared, versioned system prompt (docs/assistants.md)."""
