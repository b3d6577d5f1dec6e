"""Simulated hardware and a simulated API server: what `demo`, `--profile` (discover, run) and the tests and
benchmarks run instead of a real node and cluster.

The product imports this package only where a simulated profile is asked for (a backend's `from_profile`,
`run --simulated-root`, `demo`), so a real node never loads it (tests/simulation/test_real_node_imports.py).
`api_server` (the in-process HTTP API server), `node` (a simulated node's host files under --simulated-root),
`scratch` (simulated backends' scratch directories), `state` (simulated hardware state across restarts),
`load` (drifting device readings), `claims` (allocated claims without a scheduler). Each vendor's simulated
library sits in its own `simulated/` subpackage (dra_driver_nvidia.simulated, ...): it mirrors that vendor's
library wrapper, which no other package knows.
"""
