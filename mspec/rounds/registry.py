"""Choose a round rule by name (:data:`ROUND_RULES`, :func:`make_round_rule`): the one dispatch
of the decoder, the exact scorers of :mod:`mspec.rounds.optimum` and the experiments, and the
one place where the round's arguments are checked: the rule, the scheme and its parameters,
the number of drafts and their temperatures."""

from __future__ import annotations

import numbers

from mspec import registry
from mspec.distributions import check_temperature
from mspec.rounds.block import BlockRule
from mspec.rounds.per_position import PerPositionRule
from mspec.rounds.rule import RoundRule
from mspec.rounds.selected_block import SELECTION_SCHEMES, SelectedBlockRule
from mspec.rounds.traversal import TraversalRule

__all__ = ["ROUND_RULES", "ROUND_RULE_ALIASES", "check_draft_temperatures", "make_round_rule", "round_rule_class"]

#: round rule name -> class: ``"per-position"`` (a token-level scheme position by position,
#: :mod:`mspec.rounds.per_position`), ``"block"`` (block verification, one draft,
#: :mod:`mspec.rounds.block`), ``"traversal"`` (the tree of K drafts from the leaves up,
#: :mod:`mspec.rounds.traversal`), ``"selected-block"`` (one block selected position by
#: position with a scheme, then block verification, :mod:`mspec.rounds.selected_block`)
ROUND_RULES: dict[str, type[RoundRule]] = {cls.name: cls for cls in (PerPositionRule, BlockRule, TraversalRule,
                                                                     SelectedBlockRule)}
#: other names accepted for a rule: ``"token"``, the per-position rule's earlier name
ROUND_RULE_ALIASES = {"token": "per-position"}


def round_rule_class(name: str) -> type[RoundRule]:
    """The class of round rule ``name`` (a key of :data:`ROUND_RULES` or an alias)."""
    if isinstance(name, str) and ROUND_RULE_ALIASES.get(name, name) in ROUND_RULES:
        return ROUND_RULES[ROUND_RULE_ALIASES.get(name, name)]
    raise ValueError(f"unknown round rule {name!r}: `verify` must be one of {tuple(ROUND_RULES)} "
                     f"(or {', '.join(map(repr, ROUND_RULE_ALIASES))}, an alias of 'per-position')")


def make_round_rule(name: str, *, scheme: str | None = None, scheme_params: dict | None = None, num_drafts: int,
                    draft_temperatures=1.0, vocab_size: int | None = None) -> RoundRule:
    """Make round rule ``name`` for rounds of ``num_drafts`` drafts, its arguments checked.

    Args:
        name: a key of :data:`ROUND_RULES` (or ``"token"``, an alias of ``"per-position"``).
        scheme: the token-level scheme of ``"per-position"`` (required: a key of
            :data:`mspec.registry.SCHEMES`) or of ``"selected-block"`` (one of
            :data:`mspec.rounds.selected_block.SELECTION_SCHEMES`; default ``"optimal"``);
            ``"block"`` and ``"traversal"`` take none.
        scheme_params: extra keyword arguments of the scheme (``"per-position"`` only).
        num_drafts: K >= 1 (``"block"``: 1).
        draft_temperatures: one number (identical drafts) or K numbers, each > 0; drafts of
            equal temperature share one draft law. ``"selected-block"`` needs identical drafts.
        vocab_size: V, where known: the scheme's size limits are checked too
            (:meth:`~mspec.schemes.selection.SelectionScheme.check_scale`), and the schemes
            offered for non-identical drafts are those that run at V.

    Raises:
        ValueError: naming the argument and the fix: an unknown ``name`` or ``scheme``, a
            scheme the rule would ignore, a K the rule cannot verify, or temperatures that
            do not fit, or a size the scheme cannot run at.
    """
    cls = round_rule_class(name)
    if isinstance(num_drafts, bool) or not isinstance(num_drafts, numbers.Integral) or num_drafts < 1:
        raise ValueError(f"`num_drafts` must be an integer >= 1 (the number of drafts K), got {num_drafts!r}")
    temps = check_draft_temperatures(draft_temperatures, int(num_drafts))
    if not cls.takes_scheme and (scheme is not None or scheme_params):
        raise ValueError(f"verify={cls.name!r} verifies the drafted blocks without a token-level scheme, but got "
                         f"scheme={scheme!r}, scheme_params={scheme_params!r}: leave them out, or use "
                         "verify='per-position' or 'selected-block' to select with a scheme")
    if cls is PerPositionRule:
        return _per_position(scheme, {} if scheme_params is None else scheme_params, int(num_drafts), temps,
                             vocab_size)
    if cls is SelectedBlockRule:
        return _selected_block(scheme, scheme_params, int(num_drafts), temps)
    if cls is BlockRule and num_drafts != 1:
        raise ValueError(f"verify='block' verifies one drafted block: pass num_drafts=1 (got {num_drafts}), "
                         "or verify='traversal' / 'selected-block' for K drafts")
    return cls(num_drafts=int(num_drafts))


def check_draft_temperatures(value, k: int) -> list[float]:
    """``draft_temperatures`` as K floats > 0 (a number stands for K equal ones).

    Raises:
        ValueError: not a number or K numbers, or a temperature that is not > 0.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [check_temperature(value, "draft_temperatures")] * k
    try:
        temps = list(value)
    except TypeError:
        raise ValueError(f"`draft_temperatures` must be a number or a sequence of K = {k} numbers, "
                         f"got {value!r}") from None
    if len(temps) != k:
        raise ValueError(f"`draft_temperatures` has {len(temps)} entries but num_drafts = {k}; pass one "
                         "temperature per draft, or a single number for identical drafts")
    return [check_temperature(t, "draft_temperatures") for t in temps]


def _per_position(scheme, params: dict, k: int, temps: list[float], vocab: int | None) -> PerPositionRule:
    if not isinstance(scheme, str) or scheme not in registry.SCHEMES:
        raise ValueError(f"`scheme` must be one of {sorted(registry.SCHEMES)} (the token-level scheme that "
                         f"verify='per-position' runs at each position), got {scheme!r}")
    cls = registry.SCHEMES[scheme]
    registry.check_scheme_params(scheme, params)
    params = dict(params)
    if scheme == "single" and k != 1:
        raise ValueError(f"scheme='single' is single-draft sampling: pass num_drafts=1 (got {k}), or a K-draft "
                         "scheme such as 'specinfer' or 'optimal'")
    identical = len(set(temps)) == 1
    if not identical and not cls.supports_non_identical:
        offered = ", ".join(map(repr, _non_identical_schemes(vocab, k)))
        raise ValueError(f"scheme={scheme!r} needs identical drafts, but draft_temperatures={temps} gives each "
                         f"draft its own law; pass one draft temperature, or a scheme for non-identical drafts"
                         f"{'' if vocab is None else f' at V = {vocab}'}: {offered} (or verify='traversal')")
    if vocab is not None:
        cls.check_scale(vocab_size=vocab, num_drafts=k, identical=identical, **params)
    return PerPositionRule(scheme=scheme, params=params, num_drafts=k, temperatures=temps)


def _non_identical_schemes(vocab: int | None, k: int) -> list[str]:
    """The schemes that take non-identical drafts (and run at V = ``vocab`` with K = ``k``, where given)."""
    return [name for name, cls in registry.SCHEMES.items() if cls.supports_non_identical and name != "single"
            and (vocab is None or _runs_at(cls, vocab, k))]


def _runs_at(cls, vocab: int, k: int) -> bool:
    try:
        cls.check_scale(vocab_size=vocab, num_drafts=k, identical=False)
    except ValueError:
        return False
    return True


def _selected_block(scheme, params, k: int, temps: list[float]) -> SelectedBlockRule:
    scheme = "optimal" if scheme is None else scheme
    if scheme not in SELECTION_SCHEMES:
        raise ValueError(f"verify='selected-block' selects with `scheme`, one of {SELECTION_SCHEMES} "
                         f"(a known induced law), got scheme={scheme!r}")
    if params:
        raise ValueError(f"verify='selected-block' builds its selection schemes with their defaults: leave out "
                         f"scheme_params (got {params!r}), or use verify='per-position'")
    if len(set(temps)) > 1:
        raise ValueError("verify='selected-block' needs identical drafts (one draft temperature); "
                         "verify='traversal' takes non-identical drafts")
    return SelectedBlockRule(scheme=scheme, num_drafts=k)
