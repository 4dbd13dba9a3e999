"""The book's figure helpers (mspec_lab.display): plotly figures with precomputed sliders."""

import plotly.graph_objects as go
import pytest

from mspec_lab.display import with_two_precomputed_sliders


def _figure(a, b):
    fig = go.Figure([go.Bar(x=["u", "v"], y=[a, b]),
                     go.Scatterternary(a=[a], b=[b], c=[1.0], mode="markers"),
                     go.Bar(x=["u"], y=[a], error_y=dict(type="data", symmetric=False,
                                                         array=[b], arrayminus=[a]))])
    fig.update_layout(title=f"a={a} b={b}")
    return fig


def test_two_sliders_carry_every_pair_and_the_left_one_resets_the_right_one():
    first, second = [1, 2, 3], [10, 20]
    fig = with_two_precomputed_sliders(_figure, first, second, labels=("A", "B"),
                                       active=(1, 0), fmt=("{}", None))
    assert list(fig.data[0].y) == [2, 10] and fig.layout.title.text == "a=2 b=10"
    left, right = fig.layout.sliders
    assert (left.active, right.active) == (1, 0)
    assert left.currentvalue.prefix == "A = " and right.currentvalue.prefix == "B = "
    assert [s.label for s in left.steps] == ["1", "2", "3"]
    assert [s.label for s in right.steps] == ["10", "20"]
    for a, step in zip(first, left.steps):
        data, layout = step.args
        assert data["y"][0] == [a, 10] and data["a"][1] == [a] and data["b"][1] == [10]
        assert data["error_y.arrayminus"][2] == [a] and data["error_y.array"][2] == [10]
        assert layout["sliders[1].active"] == 0
        assert layout["title.text"] == f"a={a} b=10"
        for b, inner in zip(second, layout["sliders[1].steps"]):
            assert inner["args"][0]["y"][0] == [a, b]
            assert inner["args"][1] == {"title.text": f"a={a} b={b}"}
    for b, step in zip(second, right.steps):  # the right slider starts at a = 2
        assert step.args[0]["y"][0] == [2, b]
        assert "sliders[1].steps" not in step.args[1]
    assert "base" not in left.steps[0].args[0]  # set in no figure: not sent
    assert "x" not in left.steps[0].args[0]  # the same in every figure: not sent


def test_two_sliders_reject_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        with_two_precomputed_sliders(_figure, [], [1], labels=("A", "B"))
    with pytest.raises(ValueError, match="active"):
        with_two_precomputed_sliders(_figure, [1], [1, 2], labels=("A", "B"), active=(0, 2))
    with pytest.raises(ValueError, match="same traces"):
        with_two_precomputed_sliders(lambda a, b: go.Figure([go.Bar(y=[1])] * (a + b)),
                                     [1, 2], [0], labels=("A", "B"))


def test_website_layout_gives_title_and_legend_their_own_bands():
    from mspec_lab.display import LEGEND_ROW_PX, LEGEND_ROWS, TITLE_BAND_PX, website_layout

    above = go.Figure(go.Bar(y=[1, 2], name="a"), layout=dict(
        title="t", height=400, margin=dict(t=60),
        legend=dict(orientation="h", y=1.0, yanchor="bottom")))
    before = above.to_dict()
    layout = website_layout(before)["layout"]
    assert layout["legend"]["yref"] == "container" and layout["legend"]["yanchor"] == "top"
    assert layout["legend"]["y"] == 1 - TITLE_BAND_PX / 400
    assert layout["title"]["yref"] == "container" and layout["title"]["text"] == "t"
    assert layout["margin"]["t"] == TITLE_BAND_PX + LEGEND_ROWS * LEGEND_ROW_PX
    assert before["layout"]["legend"]["y"] == 1.0  # the figure itself is unchanged
    below = go.Figure(go.Bar(y=[1]), layout=dict(legend=dict(orientation="h", y=-0.2)))
    assert website_layout(below.to_dict()) == below.to_dict()
