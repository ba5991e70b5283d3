"""One regression test per parser bug the fuzz tests found (each input failed before its fix)."""

from __future__ import annotations

import json

import pytest

from planner.config import config_from_mapping
from planner.core.codec import round_plan_from_json, snapshot_from_json
from planner.core.errors import InputError, MosaicError
from planner.core.fields import Fields
from planner.core.hostlist import expand_hostlist
from slurm_plugin import planfile
from slurm_plugin.controller.config import controller_config
from slurm_plugin.controller.observe import _positive
from slurm_plugin.directives import decode_comment, parse_directives
from tests.fuzz.targets import PERFMODEL, PROFILES, ROUND_PLAN, SNAPSHOT
from wrapper import checkpoint, status

DEEP = "[" * 5000 + "]" * 5000
LONG_INT = "9" * 5000


@pytest.mark.parametrize("text", [DEEP, LONG_INT, b'{"a": "\xff"}'])
def test_json_that_python_cannot_load_is_an_input_error(text: str | bytes) -> None:
    """RecursionError, the 4300-digit ValueError and UnicodeDecodeError escaped before."""
    with pytest.raises(InputError, match="snap: not valid JSON"):
        snapshot_from_json(text, "snap")
    assert decode_comment("mosaic:" + (text if isinstance(text, str) else "x")) is None


def test_an_integer_beyond_a_float_is_out_of_range_not_an_overflow() -> None:
    with pytest.raises(InputError, match="key 'x': expected a finite number"):
        Fields({"x": 10**400}, "here").req_float("x")


def test_round_plan_stage_times_must_be_numbers() -> None:
    """``float(v)`` raised TypeError/ValueError on a list or a word."""
    for bad in ([1], "|", None, -1.0):
        with pytest.raises(InputError, match="stage_times_s: key 'policy'"):
            round_plan_from_json({**ROUND_PLAN, "stage_times_s": {"policy": bad}}, "rp")


@pytest.mark.parametrize("line", ["--deadline-s nan", "--duration-s inf", "--plans '[" + LONG_INT + "]'"])
def test_directives_refuse_non_finite_numbers_and_unloadable_json(line: str) -> None:
    with pytest.raises(InputError, match=r"job\.sh:2"):
        parse_directives(f"#!/bin/bash\n#MOSAIC {line}\n", "job.sh")


def test_a_trace_the_csv_module_cannot_split_is_a_trace_error() -> None:
    from planner.traces.csvio import parse_trace

    with pytest.raises(InputError, match=r"t.csv:\d+: not valid CSV"):
        parse_trace("job_id,submit_time_s,num_gpus,duration_s,model\na\rb,0,1,1,m\n", "t.csv")


def test_a_cluster_of_absurd_size_is_refused_not_built() -> None:
    from planner.cluster import cluster_from_toml

    toml = '[[nodes]]\ncount = 9223372036854775807\ngpus = 8\ngpu_type = "v100"\ncpus = 8\nmem_gb = 1\n'
    with pytest.raises(InputError, match="key 'count'"):
        cluster_from_toml(toml, "c.toml")


@pytest.mark.parametrize("text", ["n[1-100000000000]", "n[" + LONG_INT + "]"])
def test_a_hostlist_of_absurd_size_is_refused_not_expanded(text: str) -> None:
    with pytest.raises(InputError, match="hostlist"):
        expand_hostlist(text)


def test_an_unknown_preset_names_the_config_file() -> None:
    with pytest.raises(InputError, match=r"mosaic\.toml \[scheduler\]: key 'preset': unknown"):
        config_from_mapping({"preset": "-1"}, "mosaic.toml [scheduler]")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_controller_numbers_must_be_finite(value: float) -> None:
    with pytest.raises(InputError, match="round_s: expected a finite number"):
        controller_config({"round_s": value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("throughput", 5),
        ("colocation", True),
        ("sensitivity", {"cpus_per_gpu": [1, float("nan")], "mem_gb_per_gpu": [1], "throughput": [[1], [1]]}),
        ("sensitivity", {"cpus_per_gpu": [1], "mem_gb_per_gpu": [1], "throughput": [[10**400]]}),
        (
            "optimistic",
            {
                "cpu_samples_per_s": {"\u00b2": 1.0},
                "dataset_gb": 1,
                "sample_kb": 1,
                "storage_mb_per_s_per_gpu": 1,
            },
        ),
    ],
)
def test_profile_documents_refuse_wrong_shapes(key: str, value: object) -> None:
    from profiles.document import profiles_from_document

    document = json.loads(json.dumps(PROFILES))
    model = document["models"]["my-llm"]
    model.pop("sensitivity" if key == "optimistic" else key, None)
    model[key] = value
    with pytest.raises(InputError, match=r"p\.json: model 'my-llm'"):
        profiles_from_document(document, "p.json")


def test_job_files_that_are_not_utf8_or_too_deep_are_skipped(tmp_path) -> None:
    directory = status.status_dir(tmp_path, "42")
    directory.mkdir(parents=True)
    (directory / status.HEARTBEATS).write_bytes(b'{"progress": 0.5}\n{"progress": "\xff"}\n' + DEEP.encode())
    (directory / status.CHECKPOINT_MARKER).write_bytes(b'{"time": ' + LONG_INT.encode() + b"}")
    assert planfile.last_progress(tmp_path, "42") == 0.5
    assert planfile.checkpoint_time(tmp_path, "42") is None
    (directory / status.CHECKPOINT_MARKER).write_text('{"time": ' + str(10**400) + "}")
    assert planfile.checkpoint_time(tmp_path, "42") is None  # was an OverflowError
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "42.json").write_bytes(b"\xff\xfe")
    assert planfile.current_exec_plan(tmp_path, "42") is None  # was a UnicodeDecodeError


def test_a_complete_marker_that_is_not_utf8_is_an_input_error(tmp_path) -> None:
    step = checkpoint.step_dir(tmp_path, 1)
    step.mkdir()
    (step / checkpoint.COMPLETE_MARKER).write_bytes(b"\xff")
    with pytest.raises(InputError, match="not valid JSON"):
        checkpoint.latest_complete(tmp_path)


def test_a_job_id_with_a_trailing_new_line_names_no_file(tmp_path) -> None:
    """``re.match`` with ``$`` let ``"42\\n"`` through."""
    with pytest.raises(InputError, match="job id"):
        planfile.plan_path(tmp_path, "42\n")


@pytest.mark.parametrize("value", [10**400, float("nan"), float("inf"), True, -1, "5"])
def test_comment_numbers_the_controller_cannot_use_are_not_given(value: object) -> None:
    assert _positive(value) is None
    assert _positive(7) == 7.0


def test_snapshot_seed_is_valid() -> None:
    assert snapshot_from_json(SNAPSHOT, "s").jobs


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000 + "\n",  # tomllib raises RecursionError
        # a plain ValueError (Python's 4,300-digit limit; found at --hypothesis-seed=22)
        f"[[nodes]]\ncount = 1\ngpus = 1\ngpu_type = 'a'\ncpus = {LONG_INT}\nmem_gb = 1\n",
    ],
    ids=["nested", "long-int"],
)
def test_toml_python_cannot_load_is_an_input_error(text: str, tmp_path) -> None:
    """tomllib raises these instead of TOMLDecodeError."""
    from planner.cluster import cluster_from_toml
    from slurm_plugin.cli.scheduler_args import _parse_option
    from slurm_plugin.files import read_json, read_toml

    with pytest.raises(InputError, match=r"c\.toml: not valid TOML"):
        cluster_from_toml(text, "c.toml")
    path = tmp_path / "mosaic.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="not valid TOML"):
        read_toml(path)
    value = text.partition("cpus = ")[2].partition("\n")[0] or text.partition("= ")[2].strip()
    assert _parse_option(f"policy.x={value}") == ("policy", "x", value)  # taken as a word
    path.write_text(DEEP)
    with pytest.raises(InputError, match="not valid JSON"):
        read_json(path)


def test_the_cache_model_error_names_the_profile_document() -> None:
    from profiles.document import profiles_from_document

    document = json.loads(json.dumps(PROFILES))
    document["models"]["my-cnn"]["optimistic"]["dataset_gb"] = 0
    with pytest.raises(InputError, match=r"p\.json: model 'my-cnn': optimistic: cache model: dataset_gb"):
        profiles_from_document(document, "p.json")


@pytest.mark.parametrize("options", ["options = 5", "options = {policy = 3}"])
def test_options_that_are_not_tables_beside_a_command_line_option(options: str, tmp_path, capsys) -> None:
    """``-o`` merged into ``[scheduler] options`` with ``.items()`` / ``dict(v)``: AttributeError."""
    from slurm_plugin.cli.main import main

    config = tmp_path / "mosaic.toml"
    config.write_text(f'[scheduler]\npreset = "las"\n{options}\n')
    assert main(["sim", "--config", str(config), "-o", "policy.x=1", "--out", str(tmp_path / "o")]) == 2
    assert "key 'options': expected one table per stage" in capsys.readouterr().err


# Found by fuzzing in the Slurm output and performance-model parsers.
DEEP = "[" * 5000 + "]" * 5000
LONG_INT = "9" * 5000


@pytest.mark.parametrize("text", ['{"jobs": ' + DEEP + "}", '{"jobs": [], "x": ' + LONG_INT + "}"])
def test_squeue_json_python_cannot_load(text: str) -> None:
    from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json

    for parse in (parse_squeue_json, parse_sinfo_json):
        with pytest.raises(MosaicError):
            parse(text)


@pytest.mark.parametrize("which", ["expand_indices", "gres_counts"])
def test_slurm_fields_with_a_5000_digit_number(which: str) -> None:
    from slurm_plugin.slurm import parse

    text = LONG_INT if which == "expand_indices" else "gpu:" + LONG_INT
    with pytest.raises(parse.SlurmParseError):
        getattr(parse, which)(text)


def test_perfmodel_csv_the_csv_module_cannot_split() -> None:
    from profiles.perfmodel.csvio import parse_table

    with pytest.raises(MosaicError):
        parse_table("model,global_batch,gpus,iter_time_s\na\rb,1,1,1\n", "m.csv", require_time=True)


def test_perfmodel_environment_error_names_the_document() -> None:
    from profiles.perfmodel.document import from_document

    document = json.loads(json.dumps(PERFMODEL))
    document["environment"]["pcie_gb_s"] = 0
    with pytest.raises(MosaicError, match=r"model\.json"):
        from_document(document, "model.json")


@pytest.mark.parametrize("key", ["layers", "seq_len", "hidden"])
def test_perfmodel_shape_counts_of_thousands_of_digits_are_errors_naming_the_document(key: str) -> None:
    """``math.isfinite`` of a 4,001-digit layer count overflowed, and the shape's own error named
    no document (benchmarks.soak.fuzz --seed 2)."""
    from profiles.perfmodel.document import from_document

    document = json.loads(json.dumps(PERFMODEL))
    document["models"]["bert"][key] = 10**4001
    with pytest.raises(MosaicError, match=rf"model\.json: models\.bert: .*{key} must be a positive number"):
        from_document(document, "model.json")


def test_perfmodel_csv_shape_counts_beyond_64_bits_are_errors_naming_the_line() -> None:
    """A sequence length of 9.6e24 passed the cell checks and the shape's error named no file
    and line (benchmarks.soak.fuzz --seed 3)."""
    from profiles.perfmodel.csvio import parse_table

    head = "model,global_batch,gpus,iter_time_s,params_m,seq_len,hidden,layers\n"
    with pytest.raises(MosaicError, match=r"m\.csv:2: .*seq_len must be a positive number below 2\*\*64"):
        parse_table(head + "bert,32,1,0.5,340,9.6e24,1024,24\n", "m.csv", require_time=True)


def test_a_gpu_index_range_of_a_hundred_billion_is_refused_not_built() -> None:
    from slurm_plugin.slurm import parse

    with pytest.raises(parse.SlurmParseError, match="more than"):
        parse.expand_indices("0-100000000")
    assert parse.expand_indices("0-1,3") == (0, 1, 3)


def test_a_memory_size_of_400_digits_is_not_understood_rather_than_infinite() -> None:
    from slurm_plugin.slurm import parse

    with pytest.raises(parse.SlurmParseError, match="memory size"):
        parse.parse_memory_mb("9" * 400)
    assert parse.parse_memory_mb("16G") == 16384 and parse.parse_memory_mb("2048K") == 2


def test_a_trace_with_finer_than_millisecond_times_round_trips() -> None:
    """The writer rounded every time to the millisecond (found at --hypothesis-seed=39);
    millisecond values are still written as they were."""
    from planner.traces.csvio import format_trace, parse_trace

    text = "job_id,submit_time_s,num_gpus,duration_s,model\n0,0,1,2149.0023,m\n1,1.5,1,2149.002,m\n"
    jobs = parse_trace(text, "t.csv")
    assert parse_trace(format_trace(jobs), "t.csv") == jobs
    assert format_trace(jobs).splitlines()[1:] == ["0,0,1,2149.0023,m", "1,1.5,1,2149.002,m"]


@pytest.mark.parametrize("value", [10**4000, -1, 2**63])
def test_squeue_json_times_out_of_range_are_parse_errors(value: int) -> None:
    """``float()`` of a 4,000-digit submit time overflowed (found at --hypothesis-seed=43)."""
    from slurm_plugin.slurm.parse import SlurmParseError, parse_squeue_json

    job = {"job_id": 1, "job_state": "PENDING", "submit_time": value}
    with pytest.raises(SlurmParseError, match="job 1: 'submit_time' is out of range for a Unix time"):
        parse_squeue_json(json.dumps({"jobs": [job]}))


def test_squeue_job_ids_of_thousands_of_digits_are_parse_errors() -> None:
    """``int()`` of a 5,002-digit JobID in squeue's text output raised ValueError (found at
    --hypothesis-seed=62); ``str()`` of such an id in ``--json`` would have too."""
    from slurm_plugin.slurm.parse import SQUEUE_FIELDS, SlurmParseError, parse_squeue_json, parse_squeue_text

    separator = "|mosaic-sep|"
    cells = ["9" * 5002] + [""] * (len(SQUEUE_FIELDS) - 1)
    with pytest.raises(SlurmParseError, match=r"record 1: JobID '9999.* is not a job id"):
        parse_squeue_text(separator.join(cells) + separator + "\n", separator)
    job = {"job_id": 10**4000, "job_state": "PENDING", "submit_time": 1}
    with pytest.raises(SlurmParseError, match="'job_id' is out of range for a job id"):
        parse_squeue_json(json.dumps({"jobs": [job]}))
