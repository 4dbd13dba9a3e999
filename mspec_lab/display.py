"""Plotly helpers shared by the book's notebooks: one renderer, precomputed sliders.

Every notebook chapter calls :func:`use_book_renderer` once, in its setup cell. It makes
``fig.show()`` emit

* on Colab: Colab's own renderer (which loads plotly.js itself);
* elsewhere: plotly's mimetype (``application/vnd.plotly.v1+json``, drawn by JupyterLab and
  VS Code) **plus** an HTML snippet *without* plotly.js and MathJax. The book's website
  serves both scripts once, from its own ``_static`` folder (see
  ``book/_ext/mspec_book_assets.py``), so the executed pages work offline and stay small.

Interactive figures on the website use :func:`with_precomputed_slider` (or
:func:`with_two_precomputed_sliders` for a figure of two values): the page has no Python
kernel, so every position of a slider is computed when the notebook runs and stored in the
figure.

plotly is imported only when a function is called, so ``import mspec`` never needs it.
"""

from __future__ import annotations

import sys

__all__ = ["BOOK_RENDERER", "SLIDER_KEYS", "SLIDER_PAIR_KEYS", "in_colab", "use_book_renderer",
           "website_layout", "with_precomputed_slider", "with_two_precomputed_sliders"]

#: the website's band for a figure's title, and for its legend (rows of ``LEGEND_ROW_PX``)
TITLE_BAND_PX, LEGEND_ROWS, LEGEND_ROW_PX = 34, 3, 22
#: name under which :func:`use_book_renderer` registers the website renderer
BOOK_RENDERER = "mspec_book"

#: trace attributes that a step of :func:`with_precomputed_slider` replaces (dotted: nested)
SLIDER_KEYS = ("x", "y", "text", "base", "error_y.array")


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
                website_layout(fig_dict), include_plotlyjs=False, include_mathjax=False,
                full_html=False, default_width="100%", validate=False,
                # no toolbar on the website: on a phone it covers the title (drag to zoom,
                # double-click to reset, hover for values all still work)
                config={"displaylogo": False, "displayModeBar": False},
            )
            return bundle

    pio.renderers[BOOK_RENDERER] = BookRenderer()
    name = "colab" if (in_colab() if colab is None else colab) else BOOK_RENDERER
    pio.renderers.default = name
    return name


def website_layout(fig_dict: dict) -> dict:
    """The figure as the website draws it: title and legend each get their own band on top.

    A horizontal legend above the plot wraps onto more rows in a narrow (phone) column and
    then grows into the title. On the website the title is pinned to the top left of the
    figure and the legend to a band below it, tall enough for ``LEGEND_ROWS`` rows. The
    figure's own layout is kept for JupyterLab and Colab.

    Args:
        fig_dict: a plotly figure as a dict (``fig.to_dict()``).

    Returns:
        A new dict; ``fig_dict`` is not changed.
    """
    layout = dict(fig_dict.get("layout", {}))
    legend = dict(layout.get("legend", {}))
    if legend.get("orientation") != "h" or legend.get("y", 0) < 1:
        return fig_dict
    height = layout.get("height") or 450  # plotly's default height
    title = layout.get("title", {})
    title = dict(title if isinstance(title, dict) else {"text": title})
    title.update(x=0, xanchor="left", xref="container", y=1, yanchor="top", yref="container",
                 pad={"t": 8, "l": 8})
    legend.update(x=0, xanchor="left", y=1 - TITLE_BAND_PX / height, yanchor="top",
                  yref="container")
    margin = dict(layout.get("margin", {}))
    margin["t"] = max(margin.get("t", 0), TITLE_BAND_PX + LEGEND_ROWS * LEGEND_ROW_PX)
    return {**fig_dict, "layout": {**layout, "title": title, "legend": legend, "margin": margin}}


def with_precomputed_slider(make_figure, values, *, label, active=0, fmt=None):
    """A plotly figure with a slider whose steps swap in precomputed data.

    The book's website has no Python kernel, so a slider there cannot call Python. Instead
    ``make_figure`` is called once for every slider position when the notebook runs, and
    each step of the slider carries the data of its figure: moving the slider restyles
    the traces in the browser, on a static page, in Jupyter and on Colab alike.

    A step replaces, trace by trace, the attributes in :data:`SLIDER_KEYS` that are set in
    at least one of the figures (``x``, ``y``, ``text``, ``base``, error bars), and the
    title text. Everything else (axes, colours, legend) is that of the figure at
    ``active``.

    Args:
        make_figure: ``make_figure(value) -> plotly.graph_objects.Figure``. Every figure
            must have the same traces in the same order: step ``j`` gives trace ``i`` the
            data of trace ``i`` of ``make_figure(values[j])``.
        values: the slider positions, in order (a sequence; each is passed to
            ``make_figure`` once).
        label: the slider's name; the current position shows as ``"{label} = {value}"``.
        active: index in ``values`` of the position shown first.
        fmt: format string for a value in the slider (``"{:.2f}"``, ``"{}"``); default:
            two decimals for floats, ``str`` otherwise.

    Returns:
        The figure for ``values[active]`` with the slider added (a new
        ``plotly.graph_objects.Figure``; call ``.show()`` on it).

    Raises:
        ValueError: if ``values`` is empty, ``active`` is not an index into it, or the
            figures do not all have the same number of traces.
    """

    import plotly.graph_objects as go

    values = list(values)
    if not values:
        raise ValueError("values is empty: pass at least one slider position")
    if not 0 <= active < len(values):
        raise ValueError(f"active={active} is not an index into values (0..{len(values) - 1})")

    figs = [make_figure(v) for v in values]
    _check_same_traces(figs)
    data = [{key: [_trace_value(tr, key) for tr in f.data] for key in SLIDER_KEYS} for f in figs]
    keys = [k for k in SLIDER_KEYS if any(v is not None for d in data for v in d[k])]
    steps = [dict(method="update", label=_slider_label(v, fmt),
                  args=[{k: d[k] for k in keys}, {"title.text": f.layout.title.text}])
             for v, f, d in zip(values, figs, data)]
    fig = go.Figure(figs[active])
    fig.update_layout(sliders=[dict(active=active, steps=steps, pad={"t": 50},
                                    currentvalue={"prefix": f"{label} = "})])
    return fig


#: trace attributes that a step of :func:`with_two_precomputed_sliders` replaces: those of
#: :data:`SLIDER_KEYS`, lower error bars and the coordinates of ternary traces
SLIDER_PAIR_KEYS = SLIDER_KEYS + ("error_y.arrayminus", "a", "b", "c")


def with_two_precomputed_sliders(make_figure, first, second, *, labels, active=(0, 0),
                                 fmt=(None, None)):
    """A plotly figure with two sliders whose steps swap in precomputed data.

    :func:`with_precomputed_slider` for a figure of two values: ``make_figure(a, b)`` is
    called for every ``a`` in ``first`` and every ``b`` in ``second`` when the notebook
    runs; the left slider picks ``a``, the right one ``b``.

    A slider step carries fixed data, so a step of the right slider can show ``(a, b)``
    for one ``a`` only. Each step of the left slider therefore also replaces the right
    slider's steps by those for its ``a``, and puts the right slider back at
    ``second[active[1]]``: moving the left slider resets the right one.

    A step replaces, trace by trace, the attributes in :data:`SLIDER_PAIR_KEYS` that are
    set in at least one figure, and the title text; everything else is that of the
    figure at ``active``.

    Args:
        make_figure: ``make_figure(a, b) -> plotly.graph_objects.Figure``; every figure
            must have the same traces in the same order.
        first: positions of the left slider (a sequence).
        second: positions of the right slider (a sequence).
        labels: ``(left, right)`` names; a slider shows ``"{name} = {value}"``.
        active: ``(i, j)``: the figure shown first is ``make_figure(first[i], second[j])``.
        fmt: ``(left, right)`` format strings for the values (``"{:g}"``); ``None``: two
            decimals for floats, ``str`` otherwise.

    Returns:
        A new ``plotly.graph_objects.Figure`` with both sliders (call ``.show()`` on it).

    Raises:
        ValueError: ``first`` or ``second`` is empty, ``active`` is not a pair of indices
            into them, or the figures do not all have the same number of traces.
    """
    import plotly.graph_objects as go

    first, second = list(first), list(second)
    i0, j0 = _check_active(first, second, active)
    figs = {(i, j): make_figure(a, b) for i, a in enumerate(first) for j, b in enumerate(second)}
    updates = _restyle_updates(figs, SLIDER_PAIR_KEYS)

    def right_steps(i):
        return [dict(method="update", label=_slider_label(b, fmt[1]),
                     args=[updates[i, j], {"title.text": figs[i, j].layout.title.text}])
                for j, b in enumerate(second)]

    left_steps = [dict(method="update", label=_slider_label(a, fmt[0]),
                       args=[updates[i, j0], {"title.text": figs[i, j0].layout.title.text,
                                              "sliders[1].steps": right_steps(i),
                                              "sliders[1].active": j0}])
                  for i, a in enumerate(first)]
    fig = go.Figure(figs[i0, j0])
    common = dict(len=0.45, pad={"t": 50}, yanchor="top", y=0)
    fig.update_layout(sliders=[
        dict(active=i0, steps=left_steps, x=0.0, currentvalue={"prefix": f"{labels[0]} = "},
             **common),
        dict(active=j0, steps=right_steps(i0), x=0.55,
             currentvalue={"prefix": f"{labels[1]} = "}, **common),
    ])
    return fig


def _check_active(first, second, active):
    """``active`` as a pair of indices into the non-empty ``first`` and ``second``."""
    if not first or not second:
        raise ValueError("first and second must each hold at least one slider position")
    i0, j0 = active
    if not (0 <= i0 < len(first) and 0 <= j0 < len(second)):
        raise ValueError(f"active={active} is not a pair of indices into first "
                         f"(0..{len(first) - 1}) and second (0..{len(second) - 1})")
    return i0, j0


def _slider_label(value, fmt):
    """A slider position as text: ``fmt`` if given, else two decimals for a float."""
    import numbers

    if fmt is not None:
        return fmt.format(value)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return f"{value:.2f}"
    return str(value)


def _check_same_traces(figs) -> None:
    """Raise a ValueError unless every figure has the same number of traces."""
    n_traces = {len(f.data) for f in figs}
    if len(n_traces) != 1:
        raise ValueError(f"make_figure returned figures with {sorted(n_traces)} traces: every "
                         "figure must have the same traces (use empty ones where needed)")


def _trace_value(trace, key: str):
    """A trace's attribute ``key`` (dotted, e.g. ``"marker.color"``) as a list, or None if unset."""
    import numpy as np

    value = trace
    for part in key.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return np.asarray(value).tolist()


def _restyle_updates(figs, keys):
    """``{position: {key: [value of trace 0, trace 1, ...]}}`` for the keys set in some
    figure and not the same in all of them (a step need not repeat what never changes).

    Raises:
        ValueError: the figures do not all have the same number of traces.
    """
    _check_same_traces(list(figs.values()))
    data = {pos: {key: [_trace_value(tr, key) for tr in f.data] for key in keys} for pos, f in figs.items()}
    first = next(iter(data.values()))
    used = [k for k in keys if any(v is not None for d in data.values() for v in d[k])
            and any(d[k] != first[k] for d in data.values())]
    return {pos: {k: d[k] for k in used} for pos, d in data.items()}
