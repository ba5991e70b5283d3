"""Parser bugs found by the fuzz tests in modules this suite does not own, reported to their
owners; each test fails today (strict xfail): when a fix lands, the test passes, xfail
reports XPASS as a failure, and the marker (and the target's ``known`` entry) goes."""

from __future__ import annotations

import json

import pytest

from planner.errors import MosaicError
from tests.fuzz.targets import PERFMODEL

DEEP = "[" * 5000 + "]" * 5000
LONG_INT = "9" * 5000


@pytest.mark.xfail(strict=True, reason="slurm_plugin/slurm/parse.py _document catches JSONDecodeError only")
@pytest.mark.parametrize("text", ['{"jobs": ' + DEEP + "}", '{"jobs": [], "x": ' + LONG_INT + "}"])
def test_squeue_json_python_cannot_load(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json

    for parse in (parse_squeue_json, parse_sinfo_json):
        with pytest.raises(MosaicError):
            parse(text)


@pytest.mark.xfail(strict=True, reason="slurm_plugin/slurm/parse.py int() of a 5000-digit number")
@pytest.mark.parametrize("which", ["expand_indices", "gres_counts"])
def test_slurm_fields_with_a_5000_digit_number(which: str) -> None:
    from slurm_plugin.slurm import parse

    text = LONG_INT if which == "expand_indices" else "gpu:" + LONG_INT
    with pytest.raises(parse.SlurmParseError):
        getattr(parse, which)(text)


@pytest.mark.xfail(strict=True, reason="profiles/perfmodel/csvio.py: csv.Error escapes parse_table")
def test_perfmodel_csv_the_csv_module_cannot_split() -> None:
    from profiles.perfmodel.csvio import parse_table

    with pytest.raises(MosaicError):
        parse_table("model,global_batch,gpus,iter_time_s\na\rb,1,1,1\n", "m.csv", require_time=True)


@pytest.mark.xfail(
    strict=True, reason="profiles/perfmodel/query.py Environment's error does not name the file"
)
def test_perfmodel_environment_error_names_the_document() -> None:
    from profiles.perfmodel.document import from_document

    document = json.loads(json.dumps(PERFMODEL))
    document["environment"]["pcie_gb_s"] = 0
    with pytest.raises(MosaicError, match=r"model\.json"):
        from_document(document, "model.json")
