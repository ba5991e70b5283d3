"""How often the ``crius`` stage settles, and whether a settling pass changes a round.

While a job the stage decides is left waiting, it plans the round again from its own result
applied (``planner/policies/crius/policy.py``, ``_SETTLE_PASSES``). This runs the Fig. 17-style
comparison's ``crius`` rows (``benchmarks/papers/crius.py``: Venus and PAI at the artifact simulator's
load, every job elastic, on crius-256) with the stage counted: per round, how many passes it
made, and in how many rounds a later pass changed the result (so the round differs from what
one pass gave). The counting stage is the stage itself with its one-pass method wrapped.

    .venv/bin/python -m benchmarks.papers.crius_settle [--presets crius,crius-ddl] [--traces venus,pai]
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from benchmarks.common import write_result
from benchmarks.papers.crius import CLUSTER, config_of, trace
from planner.cluster import cluster_from_toml
from planner.config import build_scheduler
from planner.core.model import Job, Snapshot
from planner.policies.crius.policy import CriusAllocation
from planner.sim import SimConfig, simulate
from planner.stages import Draft


@dataclass(frozen=True)
class CountedCrius(CriusAllocation):
    """:class:`CriusAllocation` that counts its passes per round."""

    passes: collections.Counter[int] = field(default_factory=collections.Counter, compare=False, repr=False)
    changed: list[int] = field(default_factory=lambda: [0], compare=False, repr=False)
    _this_round: list[Any] = field(default_factory=list, compare=False, repr=False)

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        self._this_round.clear()
        result = super().reconfigure(snapshot, ordered, draft)
        self.passes[len(self._this_round)] += 1
        if len(self._this_round) > 1 and self._this_round[0] != result.assignments:
            self.changed[0] += 1
        return result

    def _round(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        out = super()._round(snapshot, ordered, draft)
        self._this_round.append(dict(out.assignments))
        return out


def counted(stage: CriusAllocation) -> CountedCrius:
    return CountedCrius(**{f.name: getattr(stage, f.name) for f in fields(CriusAllocation)})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="crius,crius-ddl")
    p.add_argument("--traces", default="venus,pai")
    args = p.parse_args()
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    rows = []
    for name in args.traces.split(","):
        for row in args.presets.split(","):
            config = config_of(row)
            scheduler = build_scheduler(config)
            assert isinstance(scheduler.reconfiguration, CriusAllocation), row
            stage = counted(scheduler.reconfiguration)
            result = simulate(
                nodes,
                trace(name, False),
                replace(scheduler, reconfiguration=stage),
                SimConfig(trigger=config.trigger),
            )
            s = result.summary
            out = {
                "trace": name,
                "scheduler": row,
                "rounds": sum(stage.passes.values()),
                "passes": {str(k): v for k, v in sorted(stage.passes.items())},
                "rounds_a_later_pass_changed": stage.changed[0],
                "avg_jct_s": s["avg_jct_s"],
                "restarts": s["restarts"],
                "finished": s["finished"],
            }
            print(out, flush=True)
            rows.append(out)
    write_result(
        "crius_settle",
        {
            "command": f"python -m benchmarks.papers.crius_settle --presets {args.presets} "
            f"--traces {args.traces}",
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
