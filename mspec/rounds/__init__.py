"""Round rules: how one round of K drafted blocks of L tokens is verified against the target.

* :mod:`~mspec.rounds.block`: block verification (one draft).
* :mod:`~mspec.rounds.traversal`: traversal verification (a tree of K drafts).
* :mod:`~mspec.rounds.selected_block`: select one block with a token-level scheme, then
  block verification.
* :mod:`~mspec.rounds.optimum`: the exact round optimum on tiny models, as a linear program.
"""
