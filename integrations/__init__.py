"""Integrations of the runtime with serving and generation libraries (each imports its library lazily)."""
