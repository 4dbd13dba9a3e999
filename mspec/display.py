"""Plotly output for the book's notebooks: one renderer for the website, Jupyter and Colab.

Every notebook chapter calls :func:`use_book_renderer` once, in its setup cell. It makes
``fig.show()`` emit

* on Colab: Colab's own renderer (which loads plotly.js itself);
* elsewhere: plotly's mimetype (``application/vnd.plotly.v1+json``, drawn by JupyterLab and
  VS Code) **plus** an HTML snippet *without* plotly.js and MathJax. The book's website
  serves both scripts once, from its own ``_static`` folder (see
  ``book/_ext/mspec_book_assets.py``), so the executed pages work offline and stay small.

plotly is imported only when the function is called, so ``import mspec`` never needs it.
"""

from __future__ import annotations

import sys

__all__ = ["BOOK_RENDERER", "in_colab", "use_book_renderer"]

#: name under which :func:`use_book_renderer` registers the website renderer
BOOK_RENDERER = "mspec_book"


def in_colab() -> bool:
    """Whether the code runs in a Google Colab kernel."""
    return "google.colab" in sys.modules


def use_book_renderer(*, colab: bool | None = None) -> str:
    """Make plotly's default renderer the right one for where the notebook runs.

    Args:
        colab: force Colab's renderer (``True``) or the book's (``False``); default: detect
            Colab with :func:`in_colab`.

    Returns:
        The name of the renderer that is now ``plotly.io.renderers.default``: ``"colab"``
        or :data:`BOOK_RENDERER`.
    """
    import plotly.io as pio
    from plotly.io.base_renderers import MimetypeRenderer

    class BookRenderer(MimetypeRenderer):
        """plotly's own mimetype plus HTML that relies on the page to load plotly.js."""

        def to_mimebundle(self, fig_dict):
            bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig_dict)
            bundle["text/html"] = pio.to_html(
                fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                default_width="100%", validate=False, config={"displaylogo": False},
            )
            return bundle

    pio.renderers[BOOK_RENDERER] = BookRenderer()
    name = "colab" if (in_colab() if colab is None else colab) else BOOK_RENDERER
    pio.renderers.default = name
    return name
