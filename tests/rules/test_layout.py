"""The pipeline-layout DSL, the DSV3/Kimi recipe table and the MTP-aware tail."""

from __future__ import annotations

import pytest

from cloudai_mbridge.catalog import get_model
from cloudai_mbridge.plan.layout import (
    MISSING,
    RECIPE_PP_VP,
    LayoutError,
    PipelineLayout,
    parse_layout_str,
    recipe_mtp_layers,
    recipe_stages,
    resolve_layout,
)


def test_dsl_unrolls_parentheses_and_repeats() -> None:
    # The docstring example of Megatron's parse_str_to_list.
    stages = parse_layout_str("Ettt|(tt|)*29,m|L")
    assert stages == [["embedding", "decoder", "decoder", "decoder"]] + [["decoder", "decoder"]] * 29 + [["mtp"],
                                                                                                          ["loss"]]
    assert parse_layout_str("E|t*3|L") == [["embedding"], ["decoder"] * 3, ["loss"]]
    assert parse_layout_str("(|t)*2,L") == [[], ["decoder"], ["decoder", "loss"]]


@pytest.mark.parametrize("text", ["Ex|L", "E(t)|L", "Et*|L", "E()*2|L"])
def test_dsl_rejects_unknown_characters(text: str) -> None:
    with pytest.raises(LayoutError, match="invalid layer character"):
        parse_layout_str(text)


def test_dsl_refuses_absurd_expansion() -> None:
    with pytest.raises(LayoutError, match="expands to more than"):
        parse_layout_str("Et*999999999|L")


def test_stages_go_to_ranks_vp_major() -> None:
    layout = PipelineLayout.from_stages(parse_layout_str("Et|t|t|tL"), pp=2)
    assert layout.vp == 2
    assert layout.by_rank[0] == (("embedding", "decoder"), ("decoder",))
    assert layout.by_rank[1] == (("decoder",), ("decoder", "loss"))
    assert layout.flat == ["embedding", "decoder", "decoder", "decoder", "decoder", "loss"]
    with pytest.raises(LayoutError, match="not divisible by pp=2"):
        PipelineLayout.from_stages(parse_layout_str("Et|t|tL"), pp=2)


@pytest.mark.parametrize(
    ("text", "pp", "layers", "mtp", "needle"),
    [
        ("tE|tL", 2, 2, None, "first layer"),
        ("Et|Lt", 2, 2, None, "last layer"),
        ("EEt|tL", 2, 2, None, "exactly once"),
        ("Et|tL", 2, 3, None, "decoder layers"),
        ("Et|tmL", 2, 2, None, "MTP layers 'm', mtp_num_layers is None"),
        ("Et|tmL", 2, 2, 0, "mtp_num_layers is 0"),
        ("Et|mtL", 2, 2, 1, "before the MTP"),
        ("Et|m|t|tL", 2, 2, 1, "last virtual stage"),
        ("Et|tm|m|L", 2, 2, 2, "one virtual pipeline stage"),
        ("", 1, 1, None, "no layers"),
    ],
)
def test_layout_problems(text: str, pp: int, layers: int, mtp: int | None, needle: str) -> None:
    layout = PipelineLayout.from_stages(parse_layout_str(text), pp)
    assert any(needle in p for p in layout.problems(layers, mtp)), layout.problems(layers, mtp)


def test_valid_layouts_have_no_problems() -> None:
    assert PipelineLayout.from_stages(parse_layout_str("Et|tmL"), 2).problems(2, 1) == []
    assert PipelineLayout.from_stages(parse_layout_str("Et|tL"), 2).problems(2, None) == []
    assert PipelineLayout.from_stages(parse_layout_str("Et|tL"), 2).problems(2, 0) == []


def test_mtp_helper_semantics() -> None:
    # Bridge's getattr(model_cfg, "mtp_num_layers", 1) or 0: a missing attribute means one MTP layer.
    assert recipe_mtp_layers(MISSING) == 1
    assert recipe_mtp_layers(None) == 0
    assert recipe_mtp_layers(0) == 0
    assert recipe_mtp_layers(1) == 1
    assert recipe_stages(8, 2, recipe_mtp_layers(MISSING))[-1] == ("decoder", "mtp", "loss")
    assert recipe_stages(8, 2, recipe_mtp_layers(None))[-1] == ("decoder", "loss")


def test_recipe_table_matches_bridge_entries() -> None:
    # every pair of either recipe has its decoder counts; Kimi-K2's table is DeepSeek-V3's plus (2, 8)
    assert RECIPE_PP_VP == get_model("kimi_k2").recipe_pp_vp == get_model("deepseek_v3").recipe_pp_vp | {(2, 8)}
    assert recipe_stages(1, None, 1) is None
    four = recipe_stages(4, 1, 1)
    assert [s.count("decoder") for s in four] == [16, 16, 16, 13] and four[0][0] == "embedding"
    for pp, vp in RECIPE_PP_VP - {(1, 1)}:
        for mtp in (0, 1):
            layout = PipelineLayout.from_stages(recipe_stages(pp, vp, mtp), pp)
            assert layout.vp == vp and layout.problems(61, mtp or None) == []
    with pytest.raises(LayoutError, match=r"\(3, 1\)"):
        recipe_stages(3, 1, 0)


def test_resolve_layout_sources() -> None:
    kimi, dsv3, proxy = get_model("kimi_k2"), get_model("deepseek_v3"), get_model("deepseek_v3_proxy")
    assert resolve_layout(kimi, 1, None, None, None).source == "none"
    recipe = resolve_layout(dsv3, 8, 2, None, 1)
    assert recipe.source == "recipe" and recipe.layout.layers(7)[-2:] == ["mtp", "loss"] and not recipe.problems
    # Kimi-K2 with an MTP override of 1 gets an m from the helper, consistent with mtp_num_layers = 1.
    assert not resolve_layout(kimi, 8, 2, None, 1).problems
    derived = resolve_layout(proxy, 2, 2, None, 1)
    assert derived.source == "derived" and not derived.problems and derived.layout.layers(1)[-2:] == ["mtp", "loss"]
    assert "cannot be split" in resolve_layout(proxy, 4, 2, None, 1).problems[0]
    conflict = resolve_layout(kimi, 8, 4, "Et*4|(t*4|)*14,tL", None)
    assert "conflicts" in conflict.problems[0]
