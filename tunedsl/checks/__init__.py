"""What ``check`` and every command ask before any model or GPU: the backend-independent
preflight, and settings that are valid one by one but leave nothing to learn together."""
