"""Speed benchmarks, and the command line of every benchmark and experiment.

``python -m mspec_lab <command>`` (``--help`` lists the commands; their options and how
they become calls: :mod:`mspec_lab.commands`). Speed goals are checked here, as ratios
against a baseline measured in the same run, never by timed unit tests:

* :mod:`~mspec_lab.bench.speed_baselines` (``token-level``): SpecInfer and SpecTr at OPT's
  vocabulary against single-draft;
* :mod:`~mspec_lab.bench.speed_optimal` (``optimal``): the closed form, the IS scheme, the full
  LP and the exactly optimal scheme;
* :mod:`~mspec_lab.bench.speed_gpu` (``gpu``): live decoding on a GPU, and the speed-up to expect;
* :mod:`~mspec_lab.bench.timing`: the timer they share.

The trained draft's speed (``trained-draft-speed``) is measured in its own room,
:mod:`mspec_lab.trained_draft.speed`, beside the draft itself.

The paper's experiments (commands ``experiments``, ``acceptance``, ``decoding``, ``rounds``,
``paper-run``: the run whose results the reproducing-the-paper chapter reads) and the
round-level comparison (``round-rules``: the results the verifying-whole-blocks chapter reads)
are plain functions of :mod:`mspec_lab.experiments`; this package only gives them a command line.
Synthetic LM-shaped pairs come from :mod:`mspec_lab.synthetic` (re-exported here with
:func:`~mspec_lab.bench.timing.median_time` for older imports: ``from mspec_lab.bench import
lm_like_pair, median_time``).
"""

from mspec_lab.synthetic import lm_like_pair
from mspec_lab.bench.timing import median_time

__all__ = ["lm_like_pair", "median_time"]
