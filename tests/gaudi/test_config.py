from __future__ import annotations

import pytest

from dra_driver.common.errors import ConfigError
from dra_driver_gaudi.config import API_VERSION, KIND, GaudiConfig


@pytest.mark.parametrize("parameters", [{}, {"apiVersion": API_VERSION, "kind": KIND}])
def test_valid_configs(open_profile, parameters):
    config = open_profile("gaudi2-intel-faker").validate_config(parameters)
    assert isinstance(config, GaudiConfig)
    assert (config.apiVersion, config.kind) == ("gaudi.dra-driver.io/v1alpha1", "GaudiConfig")


@pytest.mark.parametrize(
    ("parameters", "needles"),
    [
        ({"apiVersion": API_VERSION, "kind": KIND, "visibleDevices": "0"}, ["visibleDevices: unknown field", "remove it"]),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": KIND}, ["apiVersion", API_VERSION]),
        ({"apiVersion": API_VERSION, "kind": "GpuConfig"}, ["kind", "GaudiConfig"]),
        (["not", "a", "mapping"], ["must be an object"]),
    ],
)
def test_invalid_configs_name_the_field(open_profile, parameters, needles):
    with pytest.raises(ConfigError) as raised:
        open_profile("gaudi2-intel-faker").validate_config(parameters)
    for needle in needles:
        assert needle in str(raised.value)
