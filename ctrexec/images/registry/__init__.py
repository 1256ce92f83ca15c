"""Registries: the OCI distribution API, credentials, hosts.toml, and ``pull``."""
