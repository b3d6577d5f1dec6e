"""The public import path of the vendor backend interface, for backend packages outside this repository.

The interface lives in dra_driver.backend.interface; `from dra_driver.vendor import VendorBackend, ...`
keeps working here for the separate distributions that register a backend in `dra_driver.vendors`.
"""

from dra_driver.backend.interface import *  # noqa: F401,F403
