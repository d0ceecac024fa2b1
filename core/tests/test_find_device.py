"""onnxruntime-style device names ("cuda", 0) find a provider's Device whatever vendor it declares."""

from __future__ import annotations

import pytest

from ort_core import ortvalue
from ort_core.errors import InvalidArgument
from ort_core.memory import HOST, Device

VENDORED = Device("gpuish", 1, "acme")


@pytest.fixture
def devices(monkeypatch):
    monkeypatch.setattr(ortvalue, "known_devices", lambda: {HOST: "CPUExecutionProvider", VENDORED: "AcmeProvider"})


def test_a_name_and_ordinal_find_the_providers_device_with_its_vendor(devices):
    assert ortvalue.find_device("gpuish", 1) == VENDORED and ortvalue.find_device("GPUish ", "1").vendor == "acme"
    assert ortvalue.find_device(VENDORED) is VENDORED
    assert ortvalue.find_device("cpu", 3) is HOST


def test_another_ordinal_or_vendor_is_an_unknown_device_listing_the_known_ones(devices):
    with pytest.raises(InvalidArgument, match=r"unknown device gpuish:0.*'gpuish' id 1 \(AcmeProvider\)"):
        ortvalue.find_device("gpuish", 0)
    with pytest.raises(InvalidArgument, match="unknown device"):
        ortvalue.find_device(Device("gpuish", 1, "other"))
