"""Kubernetes API access: client construction, the simulated API server for tests."""
