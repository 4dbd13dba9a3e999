"""Choose a round rule by name (:data:`ROUND_RULES`, :func:`make_round_rule`): the one dispatch
of the decoder, the exact scorers of :mod:`mspec.rounds.optimum` and the experiments."""

from __future__ import annotations

import numbers

import numpy as np

from mspec.rounds.block import BlockRule
from mspec.rounds.per_position import PerPositionRule
from mspec.rounds.rule import RoundRule
from mspec.rounds.selected_block import SELECTION_SCHEMES, SelectedBlockRule
from mspec.rounds.traversal import TraversalRule
from mspec.schemes import registry

__all__ = ["ROUND_RULES", "ROUND_RULE_ALIASES", "make_round_rule", "round_rule_class"]

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
                    draft_temperatures=1.0) -> RoundRule:
    """Make round rule ``name`` for rounds of ``num_drafts`` drafts, its arguments checked.

    Args:
        name: a key of :data:`ROUND_RULES` (or ``"token"``, an alias of ``"per-position"``).
        scheme: the token-level scheme of ``"per-position"`` (required: a key of
            :data:`mspec.schemes.registry.SCHEMES`) or of ``"selected-block"`` (one of
            :data:`mspec.rounds.selected_block.SELECTION_SCHEMES`; default ``"optimal"``);
            ``"block"`` and ``"traversal"`` take none.
        scheme_params: extra keyword arguments of the scheme (``"per-position"`` only).
        num_drafts: K >= 1 (``"block"``: 1).
        draft_temperatures: one number (identical drafts) or K numbers; drafts of equal
            temperature share one draft law. ``"selected-block"`` needs identical drafts.

    Raises:
        ValueError: naming the argument and the fix: an unknown ``name`` or ``scheme``, a
            scheme the rule would ignore, a K the rule cannot verify, or temperatures that
            do not fit.
    """
    cls = round_rule_class(name)
    if isinstance(num_drafts, bool) or not isinstance(num_drafts, numbers.Integral) or num_drafts < 1:
        raise ValueError(f"`num_drafts` must be an integer >= 1 (the number of drafts K), got {num_drafts!r}")
    temps = _temperatures(draft_temperatures, int(num_drafts))
    if not cls.takes_scheme and (scheme is not None or scheme_params):
        raise ValueError(f"verify={cls.name!r} verifies the drafted blocks without a token-level scheme, but got "
                         f"scheme={scheme!r}, scheme_params={scheme_params!r}: leave them out, or use "
                         "verify='per-position' or 'selected-block' to select with a scheme")
    if cls is PerPositionRule:
        return _per_position(scheme, dict(scheme_params or {}), int(num_drafts), temps)
    if cls is SelectedBlockRule:
        return _selected_block(scheme, scheme_params, int(num_drafts), temps)
    if cls is BlockRule and num_drafts != 1:
        raise ValueError(f"verify='block' verifies one drafted block: pass num_drafts=1 (got {num_drafts}), "
                         "or verify='traversal' / 'selected-block' for K drafts")
    return cls(num_drafts=int(num_drafts))


def _temperatures(value, k: int) -> list[float]:
    """``draft_temperatures`` as K floats (a number stands for K equal ones)."""
    try:
        return [float(t) for t in np.broadcast_to(np.asarray(value, dtype=float), (k,))]
    except (TypeError, ValueError):
        raise ValueError(f"`draft_temperatures` must be a number or K = {k} numbers (num_drafts={k}), "
                         f"got {value!r}") from None


def _per_position(scheme, params: dict, k: int, temps: list[float]) -> PerPositionRule:
    if not isinstance(scheme, str) or scheme not in registry.SCHEMES:
        raise ValueError(f"verify='per-position' runs a token-level scheme at each position: `scheme` must be one "
                         f"of {sorted(registry.SCHEMES)}, got {scheme!r}")
    cls = registry.SCHEMES[scheme]
    registry.check_scheme_params(scheme, params)
    if scheme == "single" and k != 1:
        raise ValueError(f"scheme='single' is single-draft sampling: pass num_drafts=1 (got {k}), or a K-draft "
                         "scheme such as 'specinfer' or 'optimal'")
    if len(set(temps)) > 1 and not cls.supports_non_identical:
        raise ValueError(f"scheme={scheme!r} needs identical drafts (one draft temperature), got "
                         f"draft_temperatures={temps}; use 'specinfer' for drafts of different temperatures")
    return PerPositionRule(scheme=scheme, params=params, num_drafts=k, temperatures=temps)


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
