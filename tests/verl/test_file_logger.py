"""verl's own file logger (``Tracking(default_backend="file")``) writes what
gmts_core.runs.verl_tracking reads: the metrics verl logged, per step, numpy values included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from verl.utils.tracking import Tracking

from gmts_core.runs import RunLimits, find_trainer_metrics


def test_tracking_file_backend_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    tracking = Tracking(project_name="proj", experiment_name="exp", default_backend="file")
    tracking.log(data={"val-core/acc/mean@1": 0.25}, step=0)
    for step in (1, 2, 3):
        tracking.log(
            data={
                "actor/entropy": np.float32(0.5 / step),
                "critic/score/mean": float(step) / 4,
                "response_length/mean": np.float64(10.0 + step),
                "actor/pg_clipfrac": float("nan"),
                "timing_s/step": 1.5,
            },
            step=step,
        )
    tracking.finish()
    assert (tmp_path / "proj" / "exp.jsonl").is_file()  # verl's own layout
    m = find_trainer_metrics(tmp_path, RunLimits())
    assert m is not None and m.format == "verl_file_logger"
    assert m.steps == [0, 1, 2, 3]
    assert m.series["entropy"][0] is None
    assert m.series["entropy"][1:] == pytest.approx([0.5, 0.25, 0.5 / 3], rel=1e-6)
    assert m.series["reward"] == [None, 0.25, 0.5, 0.75]
    assert m.series["response_length"] == [None, 11.0, 12.0, 13.0]
    assert "clip_ratio" not in m.series  # only NaN logged: no series, as in verl's own charts
    assert "timing_s/step" in m.names and "val-core/acc/mean@1" in m.names
