"""Command-line interface: one module per command (see main.COMMANDS)."""
