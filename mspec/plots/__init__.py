"""Helpers of the book's figures: the curves of the paper's Figure 2
(:mod:`~mspec.plots.figure2`) and plotly figures with precomputed sliders that work on a
static website and on Colab (:mod:`~mspec.plots.display`)."""
