"""Choose a token-level selection scheme by name.

>>> import numpy as np, mspec
>>> rule = mspec.make_scheme("spectr", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
>>> round(rule.acceptance(), 4)
0.815
"""

from __future__ import annotations

from .importance import ImportanceSampling
from .optimal import OptimalLP
from .optimal_selection import OptimalSelection
from .selection import SelectionScheme
from .single import SingleDraft
from .specinfer import SpecInfer
from .spectr import SpecTr

#: scheme name -> class; every class is a :class:`~mspec.selection.SelectionScheme`
SCHEMES: dict[str, type[SelectionScheme]] = {
    "single": SingleDraft,
    "specinfer": SpecInfer,
    "spectr": SpecTr,
    "optimal": OptimalSelection,
    "optimal-lp": OptimalLP,
    "is": ImportanceSampling,
}


def get_scheme(name: str) -> type[SelectionScheme]:
    """Return the scheme class registered under ``name`` (see :data:`SCHEMES`)."""
    try:
        return SCHEMES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown scheme {name!r}; choose one of {sorted(SCHEMES)}") from None


def make_scheme(name: str, *, draft, target, num_drafts=None, **params) -> SelectionScheme:
    """Build scheme ``name`` for one position.

    Args:
        name: a key of :data:`SCHEMES`.
        draft: ``(V,)`` (identical drafts, with ``num_drafts``) or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        **params: scheme parameters (e.g. ``s`` and ``alphabet`` for ``"is"``).
    """
    return get_scheme(name)(draft=draft, target=target, num_drafts=num_drafts, **params)
