"""The simulated gaudi hardware a profile runs on, at the lowest layer (imported only by the backend's from_profile and by tests)."""
