"""The paper's token-level selection schemes: one position, K drafted tokens, one output token.

Every scheme is a :class:`~mspec.schemes.selection.SelectionScheme`, built for one position
from the draft law(s) ``p`` and the target law ``q`` (the paper's letters; code takes
``draft=`` and ``target=``), with an exact ``acceptance``, an exact output law and a sampler.
This room holds the paper and the exact references; faster paths to the same laws are in
:mod:`mspec.fast`, and :mod:`mspec.registry` builds either by name.

In reading order:

* :mod:`~mspec.schemes.selection`: the base class and what a selection returns.
* :mod:`~mspec.schemes.single`: single-draft speculative sampling (K = 1).
* :mod:`~mspec.schemes.specinfer`, :mod:`~mspec.schemes.spectr`: the two baselines.
* :mod:`~mspec.schemes.optimal_lp`: the optimal scheme as one linear program (small V).
* :mod:`~mspec.schemes.two_step`: the canonical decomposition's two steps as a base class;
  :mod:`~mspec.schemes.canonical` solves its selection LP.
* :mod:`~mspec.schemes.closed_form`: the optimal acceptance of two identical drafts.
* :mod:`~mspec.schemes.importance`: the paper's IS scheme (``"is"``).
* :mod:`~mspec.schemes.optimal_reference`: the exactly optimal selection at any V, in plain
  floats.
* Tools: :mod:`~mspec.schemes.lp` (LP solving with certificates) and
  :mod:`~mspec.schemes.exact` (an output law by enumeration).
"""
