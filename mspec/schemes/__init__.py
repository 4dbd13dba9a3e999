"""Token-level selection schemes: one position, K drafted tokens, one output token.

Every scheme is a :class:`~mspec.schemes.selection.SelectionScheme`, built for one position
from the draft law(s) ``p`` and the target law ``q`` (the paper's letters; code takes
``draft=`` and ``target=``), with an exact ``acceptance``, an exact output law and a sampler.

In reading order:

* :mod:`~mspec.schemes.selection`: the base class and what a selection returns.
* :mod:`~mspec.schemes.single`: single-draft speculative sampling (K = 1).
* :mod:`~mspec.schemes.specinfer`, :mod:`~mspec.schemes.spectr`: the two baselines.
* :mod:`~mspec.schemes.optimal_lp`: the optimal scheme as one linear program (small V).
* :mod:`~mspec.schemes.two_step`: the canonical decomposition's two steps as a base class;
  :mod:`~mspec.schemes.canonical` solves its selection LP.
* :mod:`~mspec.schemes.closed_form`: the optimal acceptance of two identical drafts.
* :mod:`~mspec.schemes.importance`: the IS scheme at vocabulary scale.
* :mod:`~mspec.schemes.optimal_selection`: the exactly optimal selection at vocabulary scale.
* Tools: :mod:`~mspec.schemes.lp` (LP solving with certificates),
  :mod:`~mspec.schemes.exact` (an output law by enumeration),
  :mod:`~mspec.schemes.registry` (schemes by name: :data:`~mspec.schemes.registry.SCHEMES`, :func:`~mspec.schemes.registry.make_scheme`).
"""

from mspec.schemes.registry import SCHEMES, get_scheme, make_scheme

__all__ = ["SCHEMES", "get_scheme", "make_scheme"]
