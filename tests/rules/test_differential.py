"""Differential tests: our verdict against the real megatron-core 0.16.1 on the CPU, on generated configs.

Covered differentially (see DIFFERENTIAL_RULES in cloudai_mbridge/rules/training.py):
- the layout DSL parser and validate_layer_layout: ``PipelineParallelLayerLayout(s, pp).validate_layer_layout``
  against ``PipelineLayout.from_stages(parse_layout_str(s), pp).problems`` (verdict and the per-rank stages);
- TransformerConfig.__post_init__: ``MLATransformerConfig(**kwargs)`` raising against the rules heads-per-tp,
  pipeline-layout, a2a-overlap, a2a-overlap-cuda-graph, delay-wgrad, cpu-offloading, cuda-graph,
  recompute-modules and shared-expert-overlap.

Left out of the generator on purpose: FP8 precisions and transformer_engine CUDA graphs with delay_wgrad_compute
(Megatron asks for Transformer Engine's version, which a CPU box does not have), ``moe`` in recompute_modules with
a2a overlap (0.16.1 accepts it, Megatron-LM main refuses it and so do we), and proxy layouts the payload cannot
derive (that is the payload's refusal, not Megatron's).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from rules_support import megatron_rejects, seed_plan

from cloudai_mbridge.catalog import MODELS
from cloudai_mbridge.plan.layout import LayoutError, PipelineLayout, parse_layout_str
from cloudai_mbridge.rules import TRAINING_RULES
from cloudai_mbridge.rules.training import DIFFERENTIAL_RULES

LAYOUT_CASES = 600
CONFIG_CASES = 800


def _random_stage(rng: random.Random) -> str:
    body = "".join(rng.choice("tttttmE L,") for _ in range(rng.randint(0, 4))).replace(" ", "")
    if rng.random() < 0.3:
        body = f"t*{rng.randint(0, 5)}" + body
    return body


def random_layout(rng: random.Random) -> str:
    """A loosely structured layout string: often malformed (counts, E/L/m placement, repeats)."""
    text = "|".join(_random_stage(rng) for _ in range(rng.randint(1, 8)))
    if rng.random() < 0.5:
        text = f"E{_random_stage(rng)}|({_random_stage(rng)}|)*{rng.randint(0, 4)},{_random_stage(rng)}L"
    return text


def _encode(stages: list[list[str]], rng: random.Random) -> str:
    """Write stages in the DSL, folding runs with t*n and repeated stages with (..|)*n as people do."""
    def stage(s: list[str]) -> str:
        out, i = "", 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out += f"{s[i]}*{j - i}" if j - i > 1 and rng.random() < 0.6 else s[i] * (j - i)
            i = j
        return out

    parts = [stage(s) for s in stages]
    if len(parts) > 3 and rng.random() < 0.5 and len(set(parts[1:-1])) == 1 and parts[1]:
        return f"{parts[0]}|({parts[1]}|)*{len(parts) - 2},{parts[-1]}"
    return "|".join(parts)


def layout_case(rng: random.Random) -> tuple[str, int, int, int | None]:
    """(layout, pp, num_layers, mtp_num_layers): a valid layout, then at most one mistake."""
    if rng.random() < 0.2:
        text = random_layout(rng)
        return text, rng.choice([1, 2, 3]), rng.randint(0, 8), rng.choice([None, 0, 1])
    pp, vp = rng.choice([1, 2, 3, 4]), rng.choice([1, 1, 2, 3])
    stages = [["t"] * rng.randint(0, 3) for _ in range(pp * vp)]
    stages[0].insert(0, "E")
    mtp = rng.choice([None, None, 0, 1, 2])
    stages[-1] += ["m"] * (mtp or 0) + ["L"]
    num_layers = sum(s.count("t") for s in stages)
    mistake = rng.choice(["none"] * 6 + ["layers", "mtp", "drop", "t_after_m", "m_early", "two_E", "E_late",
                                         "L_early", "char", "split_m"])
    if mistake == "layers":
        num_layers += rng.choice([-1, 1])
    elif mistake == "mtp":
        mtp = rng.choice([None, 0, 1, 2, 3])
    elif mistake == "drop" and len(stages) > 1:
        stages.pop(rng.randrange(len(stages)))
    elif mistake == "t_after_m":
        stages[-1].insert(len(stages[-1]) - 1, "t")
        num_layers += 1
    elif mistake == "m_early":
        stages[0].append("m")
    elif mistake == "two_E":
        stages[-1].insert(0, "E")
    elif mistake == "E_late" and len(stages) > 1:
        stages[0].remove("E")
        stages[1].insert(0, "E")
    elif mistake == "L_early":
        stages[-1].remove("L")
        stages[0].append("L")
    elif mistake == "split_m" and (mtp or 0) >= 1 and len(stages) > 1:
        stages[-2].append("m")
        mtp += 1
    text = _encode(stages, rng)
    if mistake == "char":
        text = text.replace("t", rng.choice(["x", "(", ")*", "T"]), 1)
    return text, pp, num_layers, mtp


def megatron_layout_verdict(text: str, pp: int, num_layers: int, mtp: int | None):
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    try:
        layout = PipelineParallelLayerLayout(text, pp)
        layout.validate_layer_layout(num_layers=num_layers, mtp_num_layers=mtp)
    except (AssertionError, IndexError, NotImplementedError) as e:
        return False, type(e).__name__, None
    return True, "", [[[t.name for t in stage] for stage in row] for row in layout.layout]


def test_layout_dsl_matches_megatron() -> None:
    pytest.importorskip("megatron.core")
    rng = random.Random(20260603)
    outcomes = Counter()
    for _ in range(LAYOUT_CASES):
        text, pp, num_layers, mtp = layout_case(rng)
        ok, why, rows = megatron_layout_verdict(text, pp, num_layers, mtp)
        try:
            ours = PipelineLayout.from_stages(parse_layout_str(text), pp)
            problems = ours.problems(num_layers, mtp)
        except LayoutError as e:
            ours, problems = None, [str(e)]
        assert ok == (not problems), (text, pp, num_layers, mtp, why, problems)
        if ok:
            assert rows == [[list(stage) for stage in row] for row in ours.by_rank], text
        outcomes[ok] += 1
    print(f"layout verdicts {dict(outcomes)}")
    # The generator must exercise both verdicts substantially.
    assert outcomes[True] > LAYOUT_CASES // 4 and outcomes[False] > LAYOUT_CASES // 4, outcomes


SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "full_iteration")
MODULES = ("core_attn", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts", "layernorm")


def random_plan(rng: random.Random):
    """A sweep point with a few features switched on at random; most single features are valid on their own."""
    full = sorted(n for n, m in MODELS.items() if not m.is_proxy)
    model = rng.choice(full * 3 + sorted(MODELS))
    overlap = rng.random() < 0.3
    recompute = rng.choice(["none"] * 4 + ["selective", "selective", "full"])
    modules = tuple(rng.sample([m for m in MODULES if not (overlap and m == "moe")], rng.randint(0, 2)))
    impl = rng.choice(["none"] * 5 + ["local", "transformer_engine"])
    explicit = None
    if rng.random() < 0.15:
        explicit = layout_case(rng)[0] if rng.random() < 0.3 else rng.choice(
            ["Et*4|(t*4|)*14,tL", "Et*4|(t*4|)*14,tmL", "Et*8|(t*8|)*6,t*5L", "Et|t|t|tL", "Et|tmL", "Et*2|t*2mL"])
    return seed_plan(
        model=model,
        tp=rng.choice([1, 2, 4, 8, 8, 8, 3]),
        pp=rng.choice([1, 2, 4, 8, 8, 16]),
        vp=rng.choice([None, None, 1, 2, 2, 4]),
        ep=rng.choice([1, 2, 8, 32, 32]),
        cp=rng.choice([1, 1, 2]),
        dispatcher=rng.choice(["alltoall", "deepep", "hybridep"]),
        moe_shared_expert_overlap=rng.choice([None] * 6 + [True, False]),
        moe_a2a_overlap=overlap,
        delay_wgrad_compute=rng.random() < 0.1 and impl != "transformer_engine",
        recompute=recompute,
        recompute_modules=modules,
        cuda_graph_impl=impl,
        cuda_graph_scope=tuple(rng.sample(SCOPES, rng.randint(0, 2))),
        cpu_offloading_num_layers=rng.choice([0] * 12 + [1, 3, 61]),
        pipeline_layout=explicit,
        mtp_num_layers=rng.choice([None] * 5 + [0, 1, 2]),
        # uneven first / last stages (ModelZoo's DeepSeek-V3 default: 4 and 1 at pp 16), now and then beside a layout
        **({"num_layers_in_first_pipeline_stage": rng.choice([None, 1, 2, 4, 4, 6, 8]),
            "num_layers_in_last_pipeline_stage": rng.choice([None, 1, 2, 5, 3, 7])} if rng.random() < 0.15 else {}),
    )


def test_transformer_config_matches_megatron() -> None:
    pytest.importorskip("megatron.core")
    rng = random.Random(1116)
    outcomes = Counter()
    fired = Counter()
    checked = 0
    while checked < CONFIG_CASES:
        plan = random_plan(rng)
        if plan.pipeline_layout is None and plan.pipeline.source == "derived" and plan.pipeline.layout is None:
            continue  # the payload refuses to derive this proxy layout; Megatron never sees it
        checked += 1
        ours = [v for v in TRAINING_RULES.check(plan) if v.rule in DIFFERENTIAL_RULES]
        theirs = megatron_rejects(plan)
        assert bool(ours) == bool(theirs), (plan, [str(v) for v in ours], theirs)
        outcomes[bool(theirs)] += 1
        fired.update({v.rule for v in ours})
    assert outcomes[True] > CONFIG_CASES // 4 and outcomes[False] > CONFIG_CASES // 4, outcomes
    # Every differential rule was the reason for a rejection at least a few times.
    assert all(fired[r] >= 3 for r in DIFFERENTIAL_RULES), fired
    print(f"config verdicts {dict(outcomes)}; rules fired {dict(fired)}")
