"""#MOSAIC directives: parsing, errors naming the line, and the comment round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_plugin.cli.main import main
from slurm_plugin.directives import DirectiveError, decode_comment, encode_comment, parse_directives

SCRIPT = """#!/bin/bash
#SBATCH --gres=gpu:2
#MOSAIC --model resnet50 --global-batch-size 256 --framework deepspeed
# a plain comment
#MOSAIC --plans '[{"zero_stage": 1}, {"zero_stage": 2}]' --tenant vision --guaranteed
#MOSAIC --deadline-s=7200 --duration-s 3600 --gpu-type a100
srun mosaic-run -- python train.py
#MOSAIC --model ignored-after-the-first-command
"""


def test_directives_become_metadata():
    assert parse_directives(SCRIPT) == {
        "model": "resnet50",
        "batch_size": 256,
        "framework": "deepspeed",
        "plans": [{"zero_stage": 1}, {"zero_stage": 2}],
        "tenant": "vision",
        "guaranteed": True,
        "deadline_s": 7200.0,
        "duration_s": 3600.0,
        "gpu_type": "a100",
    }


def test_elastic_demand_directives():
    script = (
        "#!/bin/bash\n#MOSAIC --min-gpus 1 --max-gpus=8\n"
        "#MOSAIC --gpu-type A100 --gpu-types A100,v100\necho\n"
    )
    assert parse_directives(script) == {
        "min_gpus": 1,
        "max_gpus": 8,
        "gpu_type": "A100",
        "gpu_types": ["a100", "v100"],
    }
    meta = parse_directives(script)
    assert decode_comment(encode_comment(meta)) == meta


def test_a_script_without_directives_has_no_metadata():
    assert parse_directives("#!/bin/sh\n#SBATCH -N1\nhostname\n") == {}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("#MOSAIC --modle resnet50", "job.sh:2: unknown directive '--modle'; known: --model"),
        ("#MOSAIC --global-batch-size big", "job.sh:2: --global-batch-size 'big' is not a number"),
        ("#MOSAIC --global-batch-size 0", "job.sh:2: --global-batch-size must be positive"),
        ("#MOSAIC --framework jax", "job.sh:2: --framework 'jax': expected one of torch, deepspeed"),
        ("#MOSAIC --plans '{\"a\": 1}'", "job.sh:2: --plans must be a JSON list of objects"),
        ("#MOSAIC --plan '[1'", "job.sh:2: --plan is not valid JSON"),
        ("#MOSAIC --guaranteed=yes", "job.sh:2: --guaranteed takes no value"),
        ("#MOSAIC --model", "job.sh:2: --model needs a value"),
        ("#MOSAICS --model x", "job.sh:2: '#MOSAICS' is not '#MOSAIC'"),
        ("#MOSAIC --tenant 'open", "job.sh:2: cannot split the directive line"),
        ("#MOSAIC --min-gpus 0", "job.sh:2: --min-gpus must be positive, got 0"),
        ("#MOSAIC --max-gpus two", "job.sh:2: --max-gpus 'two' is not a number"),
        ("#MOSAIC --min-gpus 4 --max-gpus 2", "job.sh:2: --min-gpus 4 is more than --max-gpus 2"),
        ("#MOSAIC --gpu-types a100,,v100", "job.sh:2: --gpu-types needs GPU type names separated by ','"),
        ("#MOSAIC --gpu-types a100,A100", "job.sh:2: --gpu-types lists a100 twice"),
        ("#MOSAIC --gpu-types a100 --gpu-type t4", "job.sh:2: --gpu-type t4 is not among --gpu-types a100"),
    ],
)
def test_errors_name_script_line_and_directive(line, message):
    with pytest.raises(DirectiveError) as info:
        parse_directives(f"#!/bin/bash\n{line}\necho\n", "job.sh")
    assert str(info.value).startswith(message)


def test_contradicting_directives_name_the_line_that_contradicts():
    script = "#!/bin/bash\n#MOSAIC --max-gpus 2\n#MOSAIC --model m\n#MOSAIC --min-gpus 4\necho\n"
    with pytest.raises(DirectiveError, match=r"^job.sh:4: --min-gpus 4 is more than --max-gpus 2"):
        parse_directives(script, "job.sh")


def test_mosaic_submit_reports_the_bad_line_and_submits_nothing(tmp_path, capsys):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#MOSAIC --model resnet50\n#MOSAIC --framwork torch\necho hi\n")
    # No Slurm is contacted: the script is rejected first (a bogus slurm.conf proves it).
    code = main(["submit", "--slurm-conf", str(tmp_path / "none.conf"), str(script)])
    err = capsys.readouterr().err
    assert code == 2 and f"{script}:3: unknown directive '--framwork'" in err


def test_mosaic_submit_refuses_to_be_told_not_to_hold(tmp_path, capsys):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    assert main(["submit", str(script), "--", "--comment=x"]) == 2
    assert "--comment is set by Mosaic" in capsys.readouterr().err


metadata = st.dictionaries(
    st.sampled_from(["model", "tenant", "batch_size", "guaranteed", "plans"]),
    st.one_of(
        st.text(max_size=20),
        st.integers(1, 10**6),
        st.booleans(),
        st.lists(st.dictionaries(st.text(min_size=1, max_size=5), st.integers(), max_size=3), max_size=3),
    ),
)


@given(metadata)
def test_comment_round_trip(meta):
    assert decode_comment(encode_comment(meta)) == meta


@pytest.mark.parametrize("comment", ["", "hello", "mosaic:", "mosaic:{bad", "mosaic:[1]"])
def test_foreign_or_damaged_comments_decode_to_none(comment):
    assert decode_comment(comment) is None
