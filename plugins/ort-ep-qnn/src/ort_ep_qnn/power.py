"""``htp_performance_mode``: the HTP power vote of each of onnxruntime's performance modes, cast for a session.

Each mode is a DCVS v3 vote (sleep latency, whether DCVS may scale clocks, the DCVS power mode, and one voltage
corner for the bus and the core) with onnxruntime's QNN provider's settings for that mode, so a mode means the same
clocks in both runtimes. A ``PowerVote`` is one session's: a power-config id created on the backend's performance
infrastructure, the mode's vote set on it, and the id destroyed when the session's provider closes (the backend then
drops the vote). "default" casts no vote. On x86-64 the HTP simulator checks and keeps votes but has no clocks to
change: there a vote changes nothing measurable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from . import qnn_api as q
from . import runtime as rt

log = logging.getLogger("ort_ep_qnn")


@dataclass(frozen=True)
class Dcvs:
    """One DCVS v3 vote: the sleep latency (us), DCVS on (1) or off (0: clocks held), the DCVS power mode, and the
    voltage corner for both the bus and the core (min, target and max alike)."""

    sleep_latency_us: int
    dcvs_enable: int
    power_mode: int
    corner: int


_PERF, _SAVER = q.POWER_MODE_PERFORMANCE, q.POWER_MODE_POWER_SAVER
MODES: dict[str, Dcvs] = {
    "burst": Dcvs(40, 0, _PERF, q.VCORNER_MAX),
    "sustained_high_performance": Dcvs(40, 0, _PERF, q.VCORNER_MAX),
    "high_performance": Dcvs(100, 0, _PERF, q.VCORNER_TURBO),
    "balanced": Dcvs(1000, 1, _PERF, q.VCORNER_NOM_PLUS),
    "low_balanced": Dcvs(1000, 1, _PERF, q.VCORNER_NOM),
    "high_power_saver": Dcvs(1000, 1, _PERF, q.VCORNER_SVS_PLUS),
    "power_saver": Dcvs(1000, 1, _PERF, q.VCORNER_SVS),
    "low_power_saver": Dcvs(1000, 1, _PERF, q.VCORNER_SVS2),
    "extreme_power_saver": Dcvs(1000, 1, _SAVER, q.VCORNER_DISABLE),
}
"""The vote of every mode but "default" (which casts none)."""


def fill(config: Any, config_id: int, vote: Dcvs) -> None:
    """Write ``vote`` for power-config ``config_id`` into a ``QnnHtpPerf_PowerConfig_t``."""
    config.option = q.POWER_CONFIG_DCVS_V3
    d = config.dcvsV3Config
    d.contextId = config_id
    d.setDcvsEnable, d.dcvsEnable, d.powerMode = 1, vote.dcvs_enable, vote.power_mode
    d.setSleepLatency, d.sleepLatency = 1, vote.sleep_latency_us
    d.setSleepDisable, d.sleepDisable = 0, 0
    d.setBusParams = d.setCoreParams = 1
    d.busVoltageCornerMin = d.busVoltageCornerTarget = d.busVoltageCornerMax = vote.corner
    d.coreVoltageCornerMin = d.coreVoltageCornerTarget = d.coreVoltageCornerMax = vote.corner


class PowerVote:
    """``mode``'s vote for one session on ``backend`` (device 0, core 0), cast at once; ``close`` withdraws it.
    Raises QnnError when the backend refuses it (the message names the call and the backend's reason)."""

    def __init__(self, backend: rt.Backend, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"htp_performance_mode={mode!r} casts no power vote")
        self.backend, self.mode, self.vote = backend, mode, MODES[mode]
        self.config_id: int | None = None
        perf = backend.perf_infrastructure()
        created = rt.ffi.new("uint32_t*")
        with backend.lock:
            mark = rt.LOG.mark()
            backend.check(perf.createPowerConfigId(0, 0, created), "QnnHtpPerfInfrastructure_createPowerConfigId",
                          mark)
        self.config_id = int(created[0])
        config = rt.ffi.new("QnnHtpPerf_PowerConfig_t*")
        fill(config, self.config_id, self.vote)
        configs = rt.ffi.new("const QnnHtpPerf_PowerConfig_t*[2]", [config, rt.ffi.NULL])
        with backend.lock:
            mark = rt.LOG.mark()
            status = perf.setPowerConfig(self.config_id, configs)
        if status != q.SUCCESS:
            self.close()
            backend.check(status, f"QnnHtpPerfInfrastructure_setPowerConfig({mode})", mark)

    def close(self) -> None:
        """Destroy the power-config id (the backend drops its vote); once, and not after the backend closed."""
        b, config_id, self.config_id = self.backend, self.config_id, None
        if config_id is None:
            return
        with b.lock:
            if not b._closed:
                b.perf_infrastructure().destroyPowerConfigId(config_id)


def cast(backend: rt.Backend, mode: str) -> PowerVote | None:
    """The session's vote for ``mode`` (None for "default"). A vote the backend refuses is logged as a warning and
    the session goes on without it, as onnxruntime's QNN provider does: clocks are not a matter of correctness."""
    if mode == "default":
        return None
    try:
        return PowerVote(backend, mode)
    except rt.QnnError as e:
        log.warning("htp_performance_mode=%s: the QNN HTP backend refused the power vote; running without it (%s)",
                    mode, e)
        return None
