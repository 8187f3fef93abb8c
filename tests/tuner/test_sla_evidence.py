"""The SLA strategy's evidence and steps on hand-built histories, and a smoke test on generated
tables (issue 22 part 6: a search that holds beyond the tables it was built on)."""

from __future__ import annotations

import pytest

from bench.tuner.generated import generated_slas, generated_table
from bench.tuner.run import optimum
from orchestrator.tuner.history import LATENCY_NOISE, History, TrialRecord
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies import SLASearchStrategy
from orchestrator.tuner.strategies.sla import Evidence, family_of, steps
from orchestrator.tuner.strategies.sla.priors import FSDP_SYNC, RECOMPUTE
from orchestrator.tuner.tuner import Tuner

LADDER = (1, 2, 4, 8, 16, 32)


def _step_s(c: Config) -> float:
    """5 ms a step plus 1 ms a sample; 4 ms sync on more than one GPU."""
    return 0.005 + 0.001 * c.micro_batch * c.grad_accum + (0.004 if c.gpus > 1 else 0.0)


def _ok(c: Config, step_s: float | None = None, p95_ms: float | None = None) -> Measurement:
    t = _step_s(c) if step_s is None else step_s
    return Measurement(
        "ok",
        p50_ms=t * 1e3,
        p95_ms=t * 1e3 if p95_ms is None else p95_ms,
        samples_per_s=c.global_batch / t,
        cost_s=1.0,
    )


def _history(space: SearchSpace, goal: Goal, runs: list[tuple[Config, Measurement]]) -> History:
    h = History(space, goal)
    for i, (c, m) in enumerate(runs):
        h.add(TrialRecord(i, c, m, goal.judge(c, m)))
    return h


def _oom(c: Config) -> tuple[Config, Measurement]:
    return c, Measurement("oom", cost_s=1.0)


def test_a_checkpointing_family_enters_once_its_sibling_ran_out_of_memory() -> None:
    """fp32 fits up to micro-batch 4 and runs out at 8; the floor needs more samples a step than
    4 gives. Checkpointing was never run, yet it has a model (the sibling's, compute x 1.25),
    it may gallop above the sibling's fits, and the next trial is checkpointing at 8 or more."""
    space = SearchSpace(micro_batches=LADDER, activation_checkpointing=(False, True))
    goal = Goal("throughput", floor=600.0)  # 4 gives 444/s; 16 with recompute ~ 640/s
    plain = [Config(m) for m in (1, 2, 4)]
    h = _history(space, goal, [(c, _ok(c)) for c in plain] + [_oom(Config(8))])
    ev = Evidence.build(h)
    ckpt = Config(8, activation_checkpointing=True)
    fam = family_of(ckpt)
    assert fam in ev.entered and fam not in ev.by_family
    base = ev.models[family_of(Config(1))]
    assert ev.models[fam].step_s(1, 16) > base.step_s(1, 16)
    assert ev.models[fam].coef[2] == pytest.approx(RECOMPUTE * base.coef[2])
    assert ev.needs_ckpt(ckpt) and ev.cap(ckpt) >= space.index(16)
    nxt = SLASearchStrategy().next_config(h)
    assert isinstance(nxt, Config) and nxt.activation_checkpointing and nxt.micro_batch >= 8


def test_an_fsdp_family_is_walked_on_more_gpus_when_ddp_cannot_fit() -> None:
    """The model state alone is too large for one GPU (DDP runs out at micro-batch 1) and FSDP
    on two GPUs runs out too: the FSDP walk moves to four GPUs, where its shards are smaller."""
    space = SearchSpace(micro_batches=LADDER, gpus=(1, 2, 4, 8), shardings=("ddp", "fsdp"))
    goal = Goal("throughput", floor=100.0)
    h = _history(space, goal, [_oom(Config(1)), _oom(Config(1, gpus=2, sharding="fsdp"))])
    nxt = SLASearchStrategy().next_config(h)
    assert nxt == Config(1, gpus=4, sharding="fsdp")


def test_an_unmeasured_fsdp_family_borrows_ddps_model_with_more_sync() -> None:
    space = SearchSpace(micro_batches=LADDER, gpus=(1, 2, 4), shardings=("ddp", "fsdp"))
    goal = Goal("throughput", floor=100.0)
    runs = [Config(m, gpus=g) for g in (1, 2) for m in (1, 4, 16)]
    ev = Evidence.build(_history(space, goal, [(c, _ok(c)) for c in runs]))
    ddp, fsdp = family_of(Config(1)), family_of(Config(1, gpus=2, sharding="fsdp"))
    assert fsdp in ev.entered
    extra_ddp = ev.models[ddp].step_s(4, 8) - ev.models[ddp].step_s(1, 8)
    extra_fsdp = ev.models[fsdp].step_s(4, 8) - ev.models[fsdp].step_s(1, 8)
    assert extra_ddp > 0 and extra_fsdp == pytest.approx(FSDP_SYNC * extra_ddp)


def test_no_infeasible_verdict_while_an_unmeasured_family_is_predicted_to_meet() -> None:
    """Every measured config misses the floor and plain fp32 cannot grow (OOM at 8): the only
    way to the floor is checkpointing, never measured. The strategy proposes it instead of
    returning ``None`` (the verdict)."""
    space = SearchSpace(micro_batches=LADDER, activation_checkpointing=(False, True))
    goal = Goal("throughput", floor=600.0)
    plain = [Config(m) for m in (1, 2, 4)]
    h = _history(space, goal, [(c, _ok(c)) for c in plain] + [_oom(Config(8))])
    assert h.best is None
    ev = Evidence.build(h)
    scored = steps.score(ev)
    assert any(p.ok and p.config.activation_checkpointing for p in scored)
    nxt = SLASearchStrategy().next_config(h)
    assert isinstance(nxt, Config) and nxt.activation_checkpointing


def test_a_latency_miss_within_noise_prunes_nothing() -> None:
    """Flat step times: micro-batch 4 misses a 20 ms ceiling by 1% (within the noise), so 8 is
    neither pruned by the tuner nor ruled out by the strategy; a 10% miss prunes 8 and up."""
    space = SearchSpace(micro_batches=LADDER)
    goal = Goal("latency", ceiling_ms=20.0)
    c4 = Config(4)
    near = _history(space, goal, [(c4, _ok(c4, 0.0202, 20.2))])
    assert near.latency_misses() == [] and near.prune_reason(Config(8)) is None
    assert not Evidence.build(near).missed(Config(8))
    far = _history(space, goal, [(c4, _ok(c4, 0.022, 22.0))])
    assert far.latency_misses() == [c4]
    assert "beyond noise" in (far.prune_reason(Config(8)) or "")
    assert Evidence.build(far).missed(Config(8)) and far.prune_reason(Config(2)) is None


def test_the_noise_is_at_least_the_largest_inversion_seen_on_a_line() -> None:
    """Micro-batch 8 measured 5% faster than 4 (only noise does that): a 4% miss is then
    within the noise."""
    space = SearchSpace(micro_batches=LADDER)
    goal = Goal("latency", ceiling_ms=20.0)
    c4, c8, c16 = Config(4), Config(8), Config(16)
    h = _history(space, goal, [(c4, _ok(c4, 0.021, 21.0)), (c8, _ok(c8, 0.020, 20.0))])
    assert h.latency_noise() == pytest.approx(0.05)
    assert h.prune_reason(c16) is None
    assert _history(space, goal, [(c4, _ok(c4))]).latency_noise() == LATENCY_NOISE


# (seed, SLA): memory wall / floor, FSDP-only / ceiling, overhead / floor, plain / ceiling
@pytest.mark.parametrize(("seed", "sla"), [(1, 0), (2, 2), (3, 1), (4, 2)])
def test_ours_finds_the_optimum_of_generated_tables(seed: int, sla: int) -> None:
    """A few seeded generated tables (the benchmark's, one per kind): the search ends within 3%
    of the true optimum of a knife-edge SLA. (Not of every one: the benchmark's rate is in
    ``bench/tuner/README.md``.)"""
    table = generated_table(seed)
    _, goal = generated_slas(table)[sla]
    opt = optimum(table, goal)
    assert opt is not None
    result = Tuner(table.space, goal, table.evaluator(), SLASearchStrategy(), patience=10).run()
    assert result.best is not None, result.reason
    assert goal.gap(result.best.verdict.value, opt) <= 0.03, result.best.config


def test_configs_of_different_plans_are_not_pooled_in_one_family() -> None:
    """On 4 GPUs, ZeRO-3 over 4 replicas, tp 2 and pp 2 (both ZeRO-3 over 2 replicas) are
    different step-time curves (parameter gathers, per-layer all-reduces, a pipeline bubble):
    each is a family of its own, so one model is never fitted on the runs of several."""
    plans = ((1, 1, 0), (1, 1, 3), (2, 1, 3), (1, 2, 3))
    space = SearchSpace(micro_batches=LADDER, gpus=(1, 4), plans=plans)
    goal = Goal("throughput", floor=100.0)
    dp, tp, pp = (
        Config(4, gpus=4, zero=3),
        Config(4, gpus=4, tp=2, zero=3),
        Config(4, gpus=4, pp=2, zero=3),
    )
    assert len({family_of(c) for c in (dp, tp, pp)}) == 3
    assert family_of(dp) == family_of(Config(4, gpus=4, sharding="fsdp"))
    runs = [(c, _ok(c, step_s=s)) for c, s in ((dp, 0.02), (tp, 0.05), (pp, 0.08))]
    runs += [(c, _ok(c, step_s=1.5 * s)) for c, s in ((Config(8, gpus=4, zero=3), 0.02),)]
    ev = Evidence.build(_history(space, goal, runs))
    assert {len(ev.by_family[family_of(c)]) for c in (tp, pp)} == {1}
    assert len(ev.by_family[family_of(dp)]) == 2
    nxt = SLASearchStrategy().next_config(_history(space, goal, runs))
    assert nxt is None or space.contains(nxt)


def test_bf16_with_checkpointing_is_scored_where_fp32s_wall_caps_bf16() -> None:
    """fp32 runs out of memory at micro-batch 1, so bf16 without checkpointing is capped at 1
    (autocast at best halves the activations): bf16 needs checkpointing above it, as fp32 does,
    and the next trial is bf16 with checkpointing. (Before, only an OOM seen under bf16 itself
    made bf16's checkpointing needed, so the memory-wall tables never measured it.)"""
    space = SearchSpace(
        micro_batches=LADDER, precisions=("fp32", "bf16"), activation_checkpointing=(False, True)
    )
    goal = Goal("throughput", floor=400.0)  # micro-batch 1 gives 167/s; 4 with recompute more
    bf16 = Config(1, precision="bf16")
    h = _history(space, goal, [_oom(Config(1)), (bf16, _ok(bf16))])
    ev = Evidence.build(h)
    ckpt = Config(2, precision="bf16", activation_checkpointing=True)
    assert ev.half_precision_cap(Config(2, precision="bf16")) == 0
    assert ev.needs_ckpt(ckpt) and not ev.needs_ckpt(Config(1, precision="bf16"))
    assert any(p.ok and p.config.precision == "bf16" for p in steps.score(ev))
    nxt = SLASearchStrategy().next_config(h)
    assert isinstance(nxt, Config) and nxt.precision == "bf16" and nxt.activation_checkpointing


def test_patience_gives_no_infeasible_verdict_while_a_config_is_predicted_to_meet() -> None:
    """Nothing meets the floor yet and a config the strategy predicts to meet it is unmeasured:
    the strategy holds off the tuner's patience stop (which would report the SLA infeasible);
    once that config is measured and misses, the verdict may come."""
    space = SearchSpace(micro_batches=LADDER, gpus=(1, 2))
    goal = Goal("throughput", floor=1500.0)
    runs = [Config(m) for m in (1, 4, 16)]
    h = _history(space, goal, [(c, _ok(c)) for c in runs])
    assert h.best is None and not SLASearchStrategy().settled(h)
    far = Goal("throughput", floor=1e6)
    # the neighbour rule: not before the closest config's neighbours on every axis are measured
    measured = list(runs)
    h = _history(space, far, [(c, _ok(c)) for c in measured])
    assert not SLASearchStrategy().settled(h)
    while (ev := Evidence.build(h)).closest is not None and (
        near := steps.open_neighbours(ev, ev.closest.config)
    ):
        measured += near
        h = _history(space, far, [(c, _ok(c)) for c in measured])
    assert SLASearchStrategy().settled(h)


# Generated tables where the strategy, before its patience hold and bf16's checkpointing rule,
# was stopped by the tuner's patience with nothing feasible (a wrong infeasible verdict):
# FSDP-only (walking bf16 on 4 GPUs while fp32 on 8 was predicted to meet the floor) and a
# memory wall (checkpointing under bf16 never measured).
@pytest.mark.parametrize(("seed", "sla"), [(26, 0), (26, 1), (25, 1), (53, 0)])
def test_no_wrong_infeasible_verdict_on_generated_tables(seed: int, sla: int) -> None:
    table = generated_table(seed)
    _, goal = generated_slas(table)[sla]
    assert optimum(table, goal) is not None
    result = Tuner(table.space, goal, table.evaluator(), SLASearchStrategy(), patience=10).run()
    assert result.status == "feasible", result.reason


def test_patience_is_held_while_a_config_is_predicted_to_beat_the_best() -> None:
    """Micro-batch 1 meets the floor; the model fitted on 1, 4 and 16 predicts larger ones far
    better: the strategy is not done, so it holds the patience. With the ladder measured to
    its top it has nothing predicted better, and the patience may stop it."""
    space = SearchSpace(micro_batches=LADDER)
    goal = Goal("throughput", floor=100.0)
    some = [Config(m) for m in (1, 4, 16)]
    assert not SLASearchStrategy().settled(_history(space, goal, [(c, _ok(c)) for c in some]))
    every = [Config(m) for m in LADDER]
    assert SLASearchStrategy().settled(_history(space, goal, [(c, _ok(c)) for c in every]))
