"""`dra-driver migrate`: rewrite device-plugin GPU requests as DRA claims (or extended-resource DeviceClasses)."""

from __future__ import annotations

from dra_driver.migrate.catalog import ClassCatalog, load as load_catalog
from dra_driver.migrate.engine import STRATEGIES, FileResult, Options, migrate
from dra_driver.migrate.report import Action, Finding, MigrationError, Report

__all__ = [
    "STRATEGIES",
    "Action",
    "ClassCatalog",
    "FileResult",
    "Finding",
    "MigrationError",
    "Options",
    "Report",
    "load_catalog",
    "migrate",
]
