"""Kubernetes API access: client construction, claim reads (the simulated API server is dra_driver.simulation.api_server)."""
