"""The shipped DeviceClasses, installed as package data (see setup.py)."""
