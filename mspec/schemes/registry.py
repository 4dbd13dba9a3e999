"""Choose a token-level selection scheme by name.

>>> import numpy as np, mspec
>>> rule = mspec.make_scheme("spectr", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
>>> round(rule.acceptance(), 4)
0.815
"""

from __future__ import annotations

from mspec.schemes.canonical import CanonicalScheme
from mspec.schemes.importance import ImportanceSampling
from mspec.schemes.importance_paper import PaperImportanceSampling
from mspec.schemes.optimal_lp import OptimalLP
from mspec.schemes.optimal_selection import OptimalSelection
from mspec.schemes.selection import SelectionScheme
from mspec.schemes.single import SingleDraft
from mspec.schemes.specinfer import SpecInfer
from mspec.schemes.spectr import SpecTr

#: every scheme class of the package, in the order the book introduces them
SCHEME_CLASSES: tuple[type[SelectionScheme], ...] = (
    SingleDraft, SpecInfer, SpecTr, OptimalLP, CanonicalScheme, PaperImportanceSampling, ImportanceSampling,
    OptimalSelection,
)
#: scheme name -> class, built from each class's ``name``
SCHEMES: dict[str, type[SelectionScheme]] = {cls.name: cls for cls in SCHEME_CLASSES}


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
        **params: scheme parameters (e.g. ``s`` and ``alphabet`` for ``"is"`` and ``"is-paper"``).
    """
    return get_scheme(name)(draft=draft, target=target, num_drafts=num_drafts, **params)
