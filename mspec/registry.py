"""Choose a token-level selection scheme by name: the paper's schemes (:mod:`mspec.schemes`)
and, where the same law has a faster path (:mod:`mspec.fast`), that path.

>>> import numpy as np, mspec
>>> rule = mspec.make_scheme("spectr", draft=[0.5, 0.5], target=[0.9, 0.1], num_drafts=2)
>>> round(rule.acceptance(), 4)
0.815
"""

from __future__ import annotations

import inspect

from mspec.fast.importance_ratio import RatioImportanceSampling
from mspec.fast.optimal_selection import OptimalSelection
from mspec.fast.spectr_newton import NewtonSpecTr
from mspec.schemes.canonical import CanonicalScheme
from mspec.schemes.importance import ImportanceSampling
from mspec.schemes.optimal_lp import OptimalLP
from mspec.schemes.selection import SelectionScheme
from mspec.schemes.single import SingleDraft
from mspec.schemes.specinfer import SpecInfer

#: every scheme class of the package, in the order the book introduces them (SpecTr and the
#: optimal selection by their fast paths: the same laws as their references in mspec.schemes)
SCHEME_CLASSES: tuple[type[SelectionScheme], ...] = (
    SingleDraft, SpecInfer, NewtonSpecTr, OptimalLP, CanonicalScheme, ImportanceSampling, RatioImportanceSampling,
    OptimalSelection,
)
#: scheme name -> class, built from each class's ``name``
SCHEMES: dict[str, type[SelectionScheme]] = {cls.name: cls for cls in SCHEME_CLASSES}
#: names that were renamed -> what to use now
RENAMED_SCHEMES = {"is-paper": "'is' (the paper's IS scheme; our variant is 'is-ratio')"}


def get_scheme(name: str) -> type[SelectionScheme]:
    """Return the scheme class registered under ``name`` (see :data:`SCHEMES`)."""
    try:
        return SCHEMES[name]
    except (KeyError, TypeError):
        if isinstance(name, str) and name in RENAMED_SCHEMES:
            raise ValueError(f"scheme {name!r} is now called {RENAMED_SCHEMES[name]}") from None
        raise ValueError(f"unknown scheme {name!r}; choose one of {sorted(SCHEMES)}") from None


def make_scheme(name: str, *, draft, target, num_drafts=None, **params) -> SelectionScheme:
    """Build scheme ``name`` for one position.

    Args:
        name: a key of :data:`SCHEMES`.
        draft: ``(V,)`` (identical drafts, with ``num_drafts``) or ``(K, V)``.
        target: ``(V,)``.
        num_drafts: K.
        **params: scheme parameters (e.g. ``s`` and ``alphabet`` for ``"is-ratio"`` and ``"is"``).

    Raises:
        ValueError: an unknown ``name``, or a parameter the scheme does not take.
    """
    check_scheme_params(name, params)
    return get_scheme(name)(draft=draft, target=target, num_drafts=num_drafts, **params)


def scheme_param_names(name: str) -> tuple[str, ...]:
    """The keyword parameters scheme ``name`` takes besides ``draft``, ``target`` and ``num_drafts``."""
    signature = inspect.signature(get_scheme(name).__init__)
    return tuple(n for n, p in signature.parameters.items()
                 if p.kind is p.KEYWORD_ONLY and n not in ("draft", "target", "num_drafts"))


def check_scheme_params(name: str, params) -> None:
    """Refuse parameters scheme ``name`` does not take, naming those it does (before any work).

    Raises:
        ValueError: an unknown ``name``, ``params`` that is not a mapping, or an unknown key.
    """
    if not hasattr(params, "keys"):
        raise ValueError(f"`scheme_params` must be a dict of keyword arguments of scheme {name!r}, got {params!r}")
    allowed = scheme_param_names(name)
    unknown = sorted(set(params) - set(allowed), key=str)
    if unknown:
        raise ValueError(f"scheme {name!r} takes no parameter {', '.join(map(repr, unknown))}: its parameters are "
                         f"{', '.join(map(repr, allowed)) or 'none'}")
