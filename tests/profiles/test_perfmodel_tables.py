"""The measured tables behind IterationTimeModel (Crius, Gavel) and their use in the speed."""

from dataclasses import replace

import pytest

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan
from planner.core.model import Assignment
from planner.sim import SimConfig, simulate
from planner.sim.progress import SpeedModel
from profiles.perfmodel import CriusTable, GavelTable, IterationTimeModel, MeasuredTable, builtin_crius
from profiles.perfmodel.crius import parse_records
from profiles.perfmodel.query import ModelShape, make_query
from profiles.speed import table_factor
from tests.builders import make_nodes, profiles, scheduler, trace_job

# Values copied from builtin/data/crius/prof_database.json.
BERT_1_3B_128 = {
    ("a100", 4): 2.9559504985809326,
    ("v100", 4): 6.765045166015625,
    ("a40", 2): 12.750449180603027,
    ("a10", 4): 8.932662963867188,  # 2 nodes x 2 GPUs
}


def shape(name: str) -> ModelShape:
    return ModelShape(name=name, params=1.0, seq_len=1, hidden=1, layers=1)


def query(
    name: str, gpus: int, batch: int, gpu_type: str | None, nodes: int = 1, plan: ExecPlan | None = None
):
    return replace(make_query(shape(name), gpus, batch, plan=plan, nodes=nodes), gpu_type=gpu_type)


def test_the_bundled_crius_data_has_its_documented_counts():
    table = builtin_crius()
    assert len(table) == 329
    # 46 model/batch keys of 16 models; 3 keys have no device set (bert_39B's only one among
    # them), and bert_15B does not fit anywhere it was profiled.
    assert len(table.models()) == 15 and "bert_39B" not in table.models()
    assert len({(r.model, r.batch_size) for r in table.records}) == 43
    assert len({r.model for r in table.records if r.fits}) == 14
    assert {r.gpu_type for r in table.records} == {"a100", "v100", "a40", "a10"}
    assert {r.gpus for r in table.records} == {1, 2, 4, 8, 16}
    assert sum(not r.fits for r in table.records) == 11
    assert {"bert_760M", "wide_resnet_2B", "moe_2.4B"} <= set(table.models())


def test_crius_lookups_return_the_measured_values_exactly():
    table = builtin_crius()
    for (gpu_type, gpus), seconds in BERT_1_3B_128.items():
        assert table.best_time_s("bert_1.3B", 128, gpu_type, gpus) == seconds
        assert table.iteration_time_s(query("bert_1.3B", gpus, 128, gpu_type)) == seconds
    # Names match ignoring case and punctuation (Crius's traces write bert__1.3B).
    assert table.best_time_s("BERT__1.3B", 128, "A100", 4) == BERT_1_3B_128[("a100", 4)]
    record = table.record("bert_1.3B", 128, "a10", 4)
    assert record is not None
    assert (record.family, record.size, record.params, record.nodes, record.gpus_per_node) == (
        "bert",
        "1.3B",
        1.3e9,
        2,
        2,
    )
    assert record.plan is None and record.samples_per_s == pytest.approx(128 / 8.932662963867188)


def test_crius_picks_the_measured_layout_and_otherwise_the_consolidated_one():
    table = builtin_crius()
    # bert_1.3B at 128 on 2 A40s: 1 node x 2 GPUs and 2 nodes x 1 GPU were both measured.
    assert table.best_time_s("bert_1.3B", 128, "a40", 2, nodes=2) == 13.151700019836426
    assert table.iteration_time_s(query("bert_1.3B", 2, 128, "a40", nodes=2)) == 13.151700019836426
    assert table.iteration_time_s(query("bert_1.3B", 2, 128, "a40", nodes=1)) == 12.750449180603027
    # 4 A10s were measured only over 2 nodes: a one-node query gets that layout.
    assert table.iteration_time_s(query("bert_1.3B", 4, 128, "a10")) == BERT_1_3B_128[("a10", 4)]


def test_crius_says_none_for_what_was_not_measured_or_does_not_fit():
    table = builtin_crius()
    assert table.iteration_time_s(query("bert_1.3B", 4, 128, None)) is None  # no type
    assert table.iteration_time_s(query("bert_1.3B", 4, 128, "k80")) is None  # type
    assert table.iteration_time_s(query("bert_1.3B", 4, 64, "a100")) is None  # batch
    assert table.iteration_time_s(query("bert_1.3B", 16, 128, "a100")) is None  # count
    assert table.iteration_time_s(query("resnet50", 4, 128, "a100")) is None  # model
    oom = next(r for r in table.records if not r.fits)
    assert table.best_time_s(oom.model, oom.batch_size, oom.gpu_type, oom.gpus, oom.nodes) is None
    assert not table.knows("resnet50") and table.knows("bert-760m")


def test_measured_configs_lists_every_record_of_a_model():
    configs = builtin_crius().measured_configs("moe_2.4B")
    assert configs and {r.model for r in configs} == {"moe_2.4B"}
    assert {r.batch_size for r in configs} == {256, 512, 1024}
    assert builtin_crius().measured_configs("gpt2") == ()


def test_parse_records_rejects_malformed_documents():
    with pytest.raises(InputError):
        parse_records({"optimal": {"bert_1.3B_128": {"1_a100_2_n_4_d": 1.0}}})  # hosts disagree
    with pytest.raises(InputError):
        parse_records({"optimal": {"bert_huge_128": {"1_a100_1_n_4_d": 1.0}}})
    with pytest.raises(InputError):
        parse_records([])
    small = CriusTable.of(parse_records({"optimal": {"x_1B_8": {"1_a10_1_n_2_d": 2.0}}}))
    assert small.best_time_s("x_1B", 8, "a10", 2) == 2.0


def test_gavel_table_gives_global_batch_over_samples_per_second():
    gavel = GavelTable.builtin()
    steps = profiles().resolve("resnet50").throughput
    from profiles.schema import ThroughputKey

    measured = steps[ThroughputKey("v100", 4, 64, True)]
    # 4 workers x 64 samples = 256 per iteration; samples/s = steps/s x 64.
    assert gavel.iteration_time_s(query("resnet50", 4, 256, "v100")) == pytest.approx(256 / (measured * 64))
    spread = steps[ThroughputKey("v100", 4, 64, False)]
    assert gavel.iteration_time_s(query("ResNet-50", 4, 256, "v100", nodes=2)) == pytest.approx(4 / spread)
    assert gavel.iteration_time_s(query("resnet50", 4, 256, None)) is None
    assert gavel.iteration_time_s(query("resnet50", 4, 4 * 63, "v100")) is None  # batch not measured
    assert gavel.iteration_time_s(query("resnet50", 3, 3 * 64, "v100")) is None  # 3 GPUs not measured
    assert gavel.iteration_time_s(query("resnet50", 4, 256, "v100", plan=ExecPlan(micro_batch=32))) is None
    assert gavel.iteration_time_s(query("bert_1.3B", 4, 128, "a100")) is None


def test_the_three_models_are_interchangeable():
    models: list[IterationTimeModel] = [builtin_crius(), GavelTable.builtin(), MeasuredTable({})]
    q = query("bert_1.3B", 4, 128, "a100")
    assert [m.iteration_time_s(q) for m in models] == [BERT_1_3B_128[("a100", 4)], None, None]


def test_a_type_change_factor_is_the_measured_ratio():
    table = builtin_crius()
    ratio = table_factor(
        table,
        model="bert_1.3B",
        batch_size=128,
        reference_type="v100",
        reference_gpus=4,
        reference_plan=None,
        gpu_type="a100",
        gpus=4,
        nodes=1,
        plan=None,
    )
    assert ratio == BERT_1_3B_128[("v100", 4)] / BERT_1_3B_128[("a100", 4)]
    # Type and count together: 4 V100s to 2 A40s.
    both = table_factor(
        table,
        model="bert_1.3B",
        batch_size=128,
        reference_type="v100",
        reference_gpus=4,
        reference_plan=None,
        gpu_type="a40",
        gpus=2,
        nodes=1,
        plan=None,
    )
    assert both == BERT_1_3B_128[("v100", 4)] / BERT_1_3B_128[("a40", 2)]
    unknown = dict(reference_type="v100", reference_gpus=4, reference_plan=None, gpus=4, nodes=1, plan=None)
    assert table_factor(table, model="bert_1.3B", batch_size=None, gpu_type="a100", **unknown) is None
    assert table_factor(table, model="bert_1.3B", batch_size=128, gpu_type="k80", **unknown) is None


def test_speed_model_uses_the_table_only_for_models_the_profiles_do_not_measure():
    a100 = {n.name: n for n in make_nodes(1, gpus=4, gpu_type="a100", cpus=16, mem_gb=256.0)}
    speed = SpeedModel(profiles(), a100)
    on_a100 = Assignment((("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3)), 16, 256.0)
    bert = trace_job("b", 0, 4, 1000, model="bert_1.3B", gpu_type="v100", batch_size=128)
    expected = BERT_1_3B_128[("v100", 4)] / BERT_1_3B_128[("a100", 4)]
    assert speed.speed(bert, on_a100) == pytest.approx(expected)
    # A Gavel-measured model keeps the profile's factors (no a100 data there: 1.0).
    resnet = trace_job("r", 0, 4, 1000, model="resnet50", gpu_type="v100", batch_size=64)
    assert speed.speed(resnet, on_a100) == SpeedModel(profiles(), a100, times=MeasuredTable({})).speed(
        resnet, on_a100
    )
    # An unmeasured batch: the table has no answer, the neutral factors apply.
    other = trace_job("o", 0, 4, 1000, model="bert_1.3B", gpu_type="v100", batch_size=64)
    assert speed.speed(other, on_a100) == 1.0


@pytest.mark.parametrize("gpu_type", ["v100", "a100", "a40"])
def test_a_crius_job_in_the_simulator_runs_as_fast_as_the_table_says_on_each_type(gpu_type):
    # A job measured on 4 V100s (1,000 s there) that accepts V100, A100 and A40 runs alone on a
    # one-node cluster of one type: its run time scales by the measured iteration times.
    nodes = make_nodes(1, gpus=4, gpu_type=gpu_type, cpus=16, mem_gb=256.0)
    job = trace_job(
        "b",
        0,
        4,
        1000.0,
        model="bert_1.3B",
        gpu_type="v100",
        batch_size=128,
        gpu_types=("v100", "a100", "a40"),
    )
    result = simulate(nodes, [job], scheduler("fifo"), SimConfig(), profiles=profiles())
    (record,) = result.records
    seconds = builtin_crius().best_time_s("bert_1.3B", 128, gpu_type, 4)
    assert seconds is not None
    assert record.jct_s == pytest.approx(1000.0 * seconds / BERT_1_3B_128[("v100", 4)])


def test_an_emulated_crius_job_runs_at_the_same_table_speed(tmp_path):
    # The emulated job reads what Slurm gave it (4 A100s on one node) and asks the same
    # SpeedModel: its speed is the measured V100/A100 ratio, as in the simulator.
    from slurm_plugin.emulate_speed import job_speed

    nodes = {n.name: n for n in make_nodes(1, gpus=4, gpu_type="a100", cpus=16, mem_gb=256.0)}
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_JOB_GPUS": "0,1,2,3",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "SLURM_CPUS_ON_NODE": "16",
        "SLURM_MEM_PER_NODE": str(256 * 1024),
    }
    job = trace_job("7", 0, 4, 1000, model="bert_1.3B", gpu_type="v100", batch_size=128)
    speed, _ = job_speed(env, tmp_path, job, nodes, profiles())
    assert speed == pytest.approx(BERT_1_3B_128[("v100", 4)] / BERT_1_3B_128[("a100", 4)])
