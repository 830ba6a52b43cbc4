"""Pipeline layouts: which layers (embedding, decoder, MTP, loss) each pipeline / virtual-pipeline stage holds.

Where the layout of a sweep point comes from, in the order the training payload consults them
(cloudai_mbridge/payload/train/config.py ``pipeline_layout``):

1. an explicit layout string in Megatron-Core's DSL (``pipeline_layout``), parsed exactly as
   ``megatron/core/transformer/pipeline_parallel_layer_layout.py`` (core_v0.16.1) ``parse_str_to_list`` (L283-L320)
   and ``PipelineParallelLayerLayout.__init__`` (L24-L83) do, and checked as ``validate_layer_layout`` (L85-L150);
2. one stage (pp·vp = 1): no layout at all;
3. full-size models: the DeepSeek-V3 / Kimi-K2 recipe table keyed by (PP, VP) -- Megatron-Bridge v0.4.0
   ``recipes/deepseek/deepseek_v3.py`` ``set_deepseek_v3_pipeline_model_parallel_layout`` L29-L50 (MTP-aware tail
   ``getattr(model_cfg, "mtp_num_layers", 1) or 0``; another pair keeps no layout and Megatron's even split of 61
   layers fails) and ``recipes/kimi/kimi_k2.py`` ``_get_kimi_k2_pipeline_layout`` L28-L47 (raises ValueError);
4. proxies (in no Bridge recipe): the same rule derived for their layer count.

Everything here is pure and cached: a sweep of a thousand points resolves a handful of distinct layouts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..catalog import ModelSpec

EMBEDDING, DECODER, MTP, LOSS = "embedding", "decoder", "mtp", "loss"
# pipeline_parallel_layer_layout.py L303-L308: the four characters of the DSL.
CHAR_TO_LAYER = {"E": EMBEDDING, "L": LOSS, "t": DECODER, "m": MTP}
# LayerType members (megatron/core/transformer/enums.py L26-L40) a list layout may name; "encoder" parses but is
# refused by validate_layer_layout (NotImplementedError).
LAYER_NAMES = frozenset({EMBEDDING, LOSS, "encoder", DECODER, MTP})

# parse_str_to_list L291-L301: first "(...)*n", then "x*n"; one pass of each, like re.sub.
_UNROLL_PARENS = re.compile(r"\(([^)]+)\)\*(\d+)")
_UNROLL_CHAR = re.compile(r"(.)\*(\d+)")
# A dry-run guard only: Megatron would happily expand "t*999999999"; we refuse to build it.
MAX_EXPANDED_CHARS = 100_000

Stage = tuple[str, ...]


class LayoutError(ValueError):
    """A layout Megatron-Core would reject; the message names the check."""


class _TooLongError(Exception):
    pass


def _unroll(pattern: re.Pattern[str], text: str) -> str:
    budget = [MAX_EXPANDED_CHARS]

    def repeat(m: re.Match[str]) -> str:
        n = int(m.group(2))
        budget[0] -= len(m.group(1)) * n
        if budget[0] < 0:
            raise _TooLongError
        return m.group(1) * n

    return pattern.sub(repeat, text)


def parse_layout_str(layout: str) -> list[list[str]]:
    """The DSL string as a list of stages (layer names), in global stage order (vp-major, then pp rank).

    ``,`` is cosmetic; ``(ab|c)*n`` and ``x*n`` unroll; ``|`` separates stages. Raises :class:`LayoutError` for a
    character outside ``E t m L`` after unrolling, as Megatron's assert does.
    """
    text = layout.replace(",", "")
    try:
        text = _unroll(_UNROLL_CHAR, _unroll(_UNROLL_PARENS, text))
    except _TooLongError:
        raise LayoutError(f"layout {layout!r} expands to more than {MAX_EXPANDED_CHARS} characters") from None
    stages: list[list[str]] = []
    for stage in text.split("|"):
        row = []
        for ch in stage:
            layer = CHAR_TO_LAYER.get(ch)
            if layer is None:
                raise LayoutError(f"invalid layer character {ch!r} in layout {layout!r}; known: E, t, m, L")
            row.append(layer)
        stages.append(row)
    return stages


@dataclass(frozen=True)
class PipelineLayout:
    """A layout split over ``pp`` ranks: ``by_rank[pp_rank][vp_stage]`` is the tuple of layer names there."""

    pp: int
    vp: int
    by_rank: tuple[tuple[Stage, ...], ...]

    @classmethod
    def from_stages(cls, stages: list[list[str]] | tuple[Stage, ...], pp: int) -> PipelineLayout:
        """PipelineParallelLayerLayout.__init__ L39-L83: stage count % pp == 0, vp = stages / pp; global stage
        ``v * pp + r`` lives on pp rank ``r`` as its virtual stage ``v``."""
        if pp < 1 or len(stages) % pp:
            raise LayoutError(f"the layout has {len(stages)} stages, which is not divisible by pp={pp}")
        vp = len(stages) // pp
        for stage in stages:
            for name in stage:
                if name.strip().lower() not in LAYER_NAMES:
                    raise LayoutError(f"{name!r} is not a Megatron LayerType")
        rows = tuple(
            tuple(tuple(n.strip().lower() for n in stages[v * pp + r]) for v in range(vp)) for r in range(pp)
        )
        return cls(pp, vp, rows)

    @property
    def flat(self) -> list[str]:
        """Layers in layer-id order (virtual stage major, then pp rank), as Megatron's ``flatten_layout``."""
        return [name for v in range(self.vp) for row in self.by_rank for name in row[v]]

    def problems(self, num_layers: int, mtp_num_layers: int | None) -> list[str]:
        """validate_layer_layout L85-L150, one message per failed check (Megatron stops at the first)."""
        flat = self.flat
        found: list[str] = []
        if not flat:
            return ["the layout has no layers at all (it needs E first and L last)"]
        if flat[0] != EMBEDDING:
            found.append(f"the first layer must be the embedding 'E', got {flat[0]!r}")
        if flat[-1] != LOSS:
            found.append(f"the last layer must be the loss 'L', got {flat[-1]!r}")
        if flat.count(EMBEDDING) != 1:
            found.append(f"the embedding 'E' must appear exactly once, found {flat.count(EMBEDDING)}")
        if flat.count(LOSS) != 1:
            found.append(f"the loss 'L' must appear exactly once, found {flat.count(LOSS)}")
        decoders = flat.count(DECODER)
        if decoders != num_layers:
            found.append(f"the layout has {decoders} decoder layers 't', the model has num_layers={num_layers}")
        mtps = flat.count(MTP)
        if not (mtps == mtp_num_layers or (mtp_num_layers is None and mtps == 0)):
            found.append(f"the layout has {mtps} MTP layers 'm', mtp_num_layers is {mtp_num_layers}")
        if MTP in flat and DECODER in flat[flat.index(MTP):]:
            found.append("decoder layers 't' must all come before the MTP layers 'm'")
        if any(MTP in row[v] for row in self.by_rank for v in range(self.vp - 1)):
            found.append("MTP layers must sit in the last virtual stage of their pipeline rank")
        if any(MTP in row[-1] and row[-1].count(MTP) != mtp_num_layers for row in self.by_rank):
            found.append("all MTP layers must be in one virtual pipeline stage")
        if "encoder" in flat:
            found.append("encoder layers are not supported in a flexible pipeline layout")
        return found

    def layers(self, pp_rank: int) -> list[str]:
        """Every layer pipeline rank ``pp_rank`` builds, over all its virtual stages."""
        return [name for stage in self.by_rank[pp_rank] for name in stage]


MISSING = object()


def recipe_mtp_layers(mtp_num_layers: int | object | None) -> int:
    """The MTP tail length the DSV3 layout helper uses: ``getattr(model_cfg, "mtp_num_layers", 1) or 0``.

    A missing attribute (pass :data:`MISSING`) counts as 1 -- the trap the Kimi-K2 seed hit: a provider without the
    attribute gets an ``m`` appended to a model that has no MTP. ``None`` and ``0`` both give no MTP layer.
    """
    if mtp_num_layers is MISSING:
        return 1
    return int(mtp_num_layers or 0)  # type: ignore[call-overload]


# recipes/deepseek/deepseek_v3.py L37-L45 (v0.4.0): decoders per stage for 61 layers.
# Kimi-K2's own table (recipes/kimi/kimi_k2.py _get_kimi_k2_pipeline_layout) is the same with no MTP tail.
_RECIPE_DECODERS: dict[tuple[int, int], tuple[int, ...] | None] = {
    (1, 1): None,
    (4, 1): (16, 16, 16, 13),
    (8, 1): (8,) * 7 + (5,),
    (4, 2): (8,) * 7 + (5,),
    (16, 1): (4,) * 15 + (1,),
    (8, 2): (4,) * 15 + (1,),
    (4, 4): (4,) * 15 + (1,),
    (2, 8): (4,) * 15 + (1,),  # Kimi-K2's table only (catalog/bridge.py KIMI_K2_LAYOUT_PP_VP)
}
RECIPE_PP_VP = frozenset(_RECIPE_DECODERS)


@lru_cache(maxsize=256)
def recipe_stages(pp: int, vp: int | None, mtp_layers: int) -> tuple[Stage, ...] | None:
    """The recipe's layout for (pp, vp) as global stages, or None for (1, 1) (no layout: everything on one stage).

    Raises :class:`LayoutError` for a pair outside the table, as both recipe helpers raise ValueError.
    """
    key = (pp, vp or 1)
    if key not in _RECIPE_DECODERS:
        raise LayoutError(f"the DeepSeek-V3/Kimi-K2 recipe has no layout for (pp, vp) = {key}")
    counts = _RECIPE_DECODERS[key]
    if counts is None:
        return None
    stages = [[DECODER] * n for n in counts]
    stages[0].insert(0, EMBEDDING)
    stages[-1].extend([MTP] * mtp_layers + [LOSS])
    return tuple(tuple(s) for s in stages)


def derived_stages(num_layers: int, stages: int, mtp_layers: int) -> tuple[Stage, ...]:
    """The recipe table's rule for any layer count, as the training payload derives proxy layouts
    (cloudai_mbridge/payload/train/config.py derived_pipeline_layout): ceil(L / S) decoders per stage, the
    remainder on the last, embedding first, MTP layers and the loss last. For 61 layers it reproduces the table."""
    per = -(-num_layers // stages)
    last = num_layers - per * (stages - 1)
    if stages < 2 or last < 0:
        raise LayoutError(f"{num_layers} decoder layers cannot be split over {stages} pipeline stages (pp*vp)")
    rows = [[DECODER] * per for _ in range(stages - 1)] + [[DECODER] * last]
    rows[0].insert(0, EMBEDDING)
    rows[-1].extend([MTP] * mtp_layers + [LOSS])
    return tuple(tuple(r) for r in rows)


# The one uneven-split problem Megatron-Core's config does not refuse (rule uneven-pipeline-pp, not differential)
UNEVEN_PP_TOO_SMALL = "both first and last pipeline stages are given but there is only one pipeline rank"


def uneven_stages(num_layers: int, pp: int, vp: int | None, first: int | None, last: int | None,
                  mtp_layers: int) -> tuple[Stage, ...]:
    """The stages Megatron-Core builds from ``num_layers_in_first_pipeline_stage`` / ``..._last_...`` (no layout
    string), checked as megatron-core 0.19.2 transformer_config.py L1988-L2062 checks them (0.17.1 L1539-L1613, the
    same code): each given count > 0 and divisible by vp; the layers left over split evenly over the middle ranks
    (the ranks whose count is not given), and each middle rank's share divisible by vp. Each rank's layers are split
    evenly over its vp virtual stages; the embedding goes first, the MTP layers and the loss last (where Megatron's
    pre-/post-process run without a layout)."""
    vps = vp if vp and vp > 1 else None
    middle_layers, middle_ranks = num_layers, pp
    for name, count in (("first", first), ("last", last)):
        if count is None:
            continue
        if count <= 0:
            raise LayoutError(f"num_layers_in_{name}_pipeline_stage must be larger than 0 (got {count})")
        if vps and count % vps:
            raise LayoutError(f"num_layers_in_{name}_pipeline_stage = {count} must be divisible by vp = {vps}")
        middle_layers -= count
        middle_ranks -= 1
    if bool(middle_layers) != bool(middle_ranks):
        raise LayoutError(f"{middle_layers} middle layers remaining but {middle_ranks} middle pipeline stages")
    if middle_ranks and middle_layers % middle_ranks:
        raise LayoutError(f"the {middle_layers} middle layers are not divisible by the {middle_ranks} middle pipeline "
                          "ranks")
    per_middle = middle_layers // middle_ranks if middle_ranks else 0
    if middle_ranks and vps and per_middle % vps:
        raise LayoutError(f"{per_middle} layers on each middle pipeline rank are not divisible by vp = {vps}")
    # Megatron-Core's config accepts the rest (a negative middle over -1 ranks divides); its layer builder then gives
    # the one rank of pp = 1 the last count only (transformer_block.py get_num_layers_to_build)
    if middle_ranks < 0 or per_middle < 0:
        raise LayoutError(f"{UNEVEN_PP_TOO_SMALL} (pp = {pp}): Megatron-Core would build {last or first} of the "
                          f"{num_layers} layers")
    counts = [per_middle] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    v = vps or 1
    rows = [[DECODER] * (counts[r] // v) for _ in range(v) for r in range(pp)]  # global stage v * pp + r
    rows[0].insert(0, EMBEDDING)
    rows[-1].extend([MTP] * mtp_layers + [LOSS])
    return tuple(tuple(r) for r in rows)


@dataclass(frozen=True)
class ResolvedLayout:
    """What a plan's pipeline ends up as: the layout (None without pipelining or when none could be built), where
    it came from ("explicit", "uneven", "recipe", "derived" or "none") and why it is unusable when it is."""

    layout: PipelineLayout | None
    source: str
    problems: tuple[str, ...]


@lru_cache(maxsize=1024)
def resolve_layout(
    model: ModelSpec, pp: int, vp: int | None, explicit: str | None, mtp_num_layers: int | None,
    first: int | None = None, last: int | None = None,
) -> ResolvedLayout:
    """The layout the training payload hands to Megatron for this plan, checked the way Megatron-Core checks it.

    ``mtp_num_layers`` is the value the model config carries (None = no MTP). ``vp`` of None or 1 both mean "no
    interleaving" (Megatron gets None) and an explicit layout then decides VP itself. Without an explicit layout:
    one stage needs none; full-size models take the recipe table; proxies (in no Bridge recipe) take
    :func:`derived_stages`. ``first`` / ``last``: num_layers_in_first/last_pipeline_stage; without an explicit
    layout they decide the split (:func:`uneven_stages`; with one, Megatron refuses both: rule uneven-pipeline).
    """
    mtp_layers = recipe_mtp_layers(mtp_num_layers)
    megatron_vp = vp if vp and vp > 1 else None
    if explicit is None and (first is not None or last is not None):
        try:
            return ResolvedLayout(PipelineLayout.from_stages(
                uneven_stages(model.num_layers, pp, vp, first, last, mtp_layers), pp), "uneven", ())
        except LayoutError as e:
            return ResolvedLayout(None, "uneven", (str(e),))
    if explicit is None and pp * (vp or 1) == 1:
        return ResolvedLayout(None, "none", ())
    source = "explicit" if explicit is not None else "derived" if model.is_proxy else "recipe"
    try:
        if explicit is not None:
            stages = tuple(tuple(s) for s in parse_layout_str(explicit))
        elif model.is_proxy:
            stages = derived_stages(model.num_layers, pp * (vp or 1), mtp_layers)
        else:
            if (pp, vp or 1) not in model.recipe_pp_vp:
                raise LayoutError(f"the {model.name} recipe has no layout for (pp, vp) = {(pp, vp or 1)}")
            recipe = recipe_stages(pp, vp, mtp_layers)
            if recipe is None:
                return ResolvedLayout(None, "none", ())
            stages = recipe
        layout = PipelineLayout.from_stages(stages, pp)
    except LayoutError as e:
        return ResolvedLayout(None, source, (str(e),))
    problems = []
    if megatron_vp is not None and megatron_vp != layout.vp:
        problems.append(f"vp={vp} conflicts with the layout's {layout.vp} virtual stages per rank")
    problems += layout.problems(model.num_layers, mtp_num_layers)
    return ResolvedLayout(layout, source, tuple(problems))
