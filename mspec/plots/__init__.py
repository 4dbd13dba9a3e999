"""The curves of the paper's Figure 2 (:mod:`~mspec.plots.figure2`), drawn in chapter 5; the
book's plotly output lives in the workshop (:mod:`mspec_lab.display`)."""
