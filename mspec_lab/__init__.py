"""mspec_lab: the workshop beside the :mod:`mspec` library.

What the book and the project's claims are measured with, kept out of the algorithms:

* ``mspec_lab.experiments``: the paper's experiments and the round-rule comparison as
  plain functions, with resumable result tables and provenance.
* ``mspec_lab.bench``: speed benchmarks (ratios against a baseline of the same run).
* :mod:`~mspec_lab.models`: model pairs by name (presets, hub and GGUF loading, GPU planning).
* :mod:`~mspec_lab.trained_draft`: the trained draft of the offline model (the preset
  ``"smollm2-distilled"``): the model, its training, its committed weights, its speed and its
  acceptance.
* :mod:`~mspec_lab.data`: prompts of the paper's datasets (local samples, the hub, or a
  built-in few).
* :mod:`~mspec_lab.display`: the book's plotly output (one renderer, precomputed sliders).
* :mod:`~mspec_lab.metrics`: output-quality metrics (ROUGE-L, BLEU).
* ``mspec_lab.cli``: the command line, ``python -m mspec_lab <command>`` (or
  ``mspec-lab <command>``).

It installs with ``mspec`` (one ``pyproject.toml``), so pages that read results work on Colab.
"""
