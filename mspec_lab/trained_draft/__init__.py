"""The trained draft: a small draft model for SmolLM2-135M-Instruct, trained on the target's own
samples, with everything that makes, stores and measures it (the model preset
``"smollm2-distilled"`` of :func:`mspec_lab.models.load_pair`, the offline default).

In reading order:

* :mod:`~mspec_lab.trained_draft.model`: what the trained draft is (the target's first layers,
  shared; a trained adapter layer and norm; an LM head over the most frequent tokens), built
  around a loaded target by :func:`~mspec_lab.trained_draft.model.trained_draft_model`, and
  how its own weights are saved and loaded.
* :mod:`~mspec_lab.trained_draft.train`: how it is trained, by distillation from the target's
  samples; command ``python -m mspec_lab trained-draft-train``.
* ``weights/``: the committed weights (adapter, norm, token list: ``adapter.safetensors``) and
  the provenance of the run that trained them (``provenance.json``), shipped with the package.
* :mod:`~mspec_lab.trained_draft.speed`: its token rate against plain sampling on the
  machine that runs it (at best 0.78 ± 0.02x plain sampling, K = 2, L = 1, one thread, on
  the 2-core AMD EPYC machine of the committed run: no speed-up there), command ``python -m mspec_lab
  trained-draft-speed`` (``results/offline_default/trained_draft.json``); and that machine's
  pass curve, command ``python -m mspec_lab trained-draft-curve``
  (``results/offline_default/pass_curve.json``).
* ``mspec_lab.trained_draft.regime``: its token-level acceptance on the positions of the
  reproducing-the-paper chapter, a second regime beside the same-weights draft; command
  ``python -m mspec_lab trained-draft-regime``
  (``results/offline_default/trained_regime.json``).

Nothing is imported here: each module loads only what it needs.
"""
