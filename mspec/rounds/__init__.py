"""Round rules: how one round of K drafted blocks of L tokens is verified against the target.

Every rule is a :class:`~mspec.rounds.rule.RoundRule` (its exact ``law``, ``verify`` with a
numpy Generator, ``expected_tokens``), made by name with :func:`~mspec.rounds.registry.make_round_rule` from
:data:`~mspec.rounds.registry.ROUND_RULES`:

* :mod:`~mspec.rounds.per_position`: a token-level scheme, position by position.
* :mod:`~mspec.rounds.block`: block verification (one draft).
* :mod:`~mspec.rounds.traversal`: traversal verification (a tree of K drafts).
* :mod:`~mspec.rounds.selected_block`: select one block with a token-level scheme, then
  block verification.
* :mod:`~mspec.rounds.optimum`: the exact round optimum on tiny models, as a linear program.
"""

from mspec.rounds.registry import ROUND_RULES, make_round_rule
from mspec.rounds.rule import RoundOutcome, RoundRule

__all__ = ["ROUND_RULES", "RoundOutcome", "RoundRule", "make_round_rule"]
