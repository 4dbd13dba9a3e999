"""Speculative decoding with language models (torch + transformers).

* :mod:`~mspec.lm.decoding`: :func:`~mspec.lm.decoding.speculative_generate`, the live
  decoder (draft K blocks of L tokens, score them with the target in one pass, verify the
  round with a rule of :data:`mspec.rounds.ROUND_RULES`), and plain sampling beside it;
  its KV caches (:mod:`~mspec.lm.cache`), argument checks (:mod:`~mspec.lm.checks`) and
  result types (:mod:`~mspec.lm.result`) beside it.
* :mod:`~mspec.lm.models`: :class:`~mspec.lm.models.ModelPair` and the drafts built from a
  target (early exit); the tests' tiny offline model.

Loading pairs by name (presets, the hub, GGUF files, GPU planning) and the prompts of the
paper's datasets are the workshop's: :mod:`mspec_lab.models`, :mod:`mspec_lab.data`.
"""
