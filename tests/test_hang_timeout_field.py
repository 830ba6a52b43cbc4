"""The test field hang_timeout_s (issue 43): checked where the test file is read like every count (one line naming
the field, the value and the fix), and handed to the payload's config as given; unset, the config has no key and the
payload's watchdog takes its default (payload/train/watchdog.py, 1200 s)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cloudai_mbridge.cli.friendly import friendly_lines
from cloudai_mbridge.payload.train.config import check_config
from cloudai_mbridge.workloads.training.test_definition import (
    MBridgeTrainingCmdArgs,
    MBridgeTrainingTestDefinition,
)

TRAIN = {"model": "deepseek_v3_proxy", "gpu": "h200", "ep": 2, "gbs": 16}


@pytest.mark.parametrize(("value", "says"), [("60", '"60"'), (-5, "-5"), (7 * 24 * 3600 + 1, "604801"),
                                             (1.5, "1.5"), (True, "true")])
def test_a_bad_value_is_one_line_naming_field_value_and_fix(value, says) -> None:
    with pytest.raises(ValidationError) as e:
        MBridgeTrainingCmdArgs.model_validate({**TRAIN, "hang_timeout_s": value})
    (line,) = friendly_lines(e.value.errors())
    assert "hang_timeout_s" in line and says in line and "Fix: " in line, line


@pytest.mark.parametrize("value", [None, 0, 90])
def test_the_value_reaches_the_payload_config(value) -> None:
    from cloudai.core import TestRun

    args = {**TRAIN, **({} if value is None else {"hang_timeout_s": value})}
    tdef = MBridgeTrainingTestDefinition.model_validate(
        {"name": "p", "description": "d", "test_template_name": "MBridgeTraining", "cmd_args": args})
    tr = TestRun(name="p", test=tdef, num_nodes=1, nodes=[], output_path="/nonexistent/out", time_limit="01:00:00")
    config = tdef.payload_config(tr, None, "/nonexistent/out")
    assert config.get("hang_timeout_s") == value
    assert check_config(config)["hang_timeout_s"] == (1200 if value is None else value)
