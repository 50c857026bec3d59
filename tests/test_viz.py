"""The two-form slider: the static HTML contract and the live widget."""

import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from grpo_core import viz  # noqa: E402


def draw(G, beta):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, G * (1 + beta)])
    ax.set_title(f"G={G} beta={beta}")
    return fig


@pytest.fixture(scope="module")
def view():
    return viz.slider("demo-g", {"G": [1, 2, 8], "beta": [0.0, 0.5]}, draw, initial={"G": 2},
                      alt="a line")


def test_static_html_follows_the_contract(view):
    html = view.html()
    assert html.count('class="grpo-slider"') == 1 and 'id="grpo-slider-demo-g"' in html
    inputs = re.findall(r'<input type="range"[^>]*>', html)
    assert len(inputs) == 2
    labels = [json.loads(re.search(r'data-labels="([^"]*)"', i).group(1).replace("&quot;", '"'))
              for i in inputs]
    assert labels == [["1", "2", "8"], ["0", "0.5"]]
    assert 'value="1"' in inputs[0] and 'value="0"' in inputs[1]  # initial G=2, beta=0
    frames = re.findall(r'<img class="grpo-slider-frame"[^>]*>', html)
    keys = [re.search(r'data-key="([^"]*)"', f).group(1) for f in frames]
    assert keys == [f"G={g};beta={b}" for g in ("1", "2", "8") for b in ("0", "0.5")]
    visible = [k for k, f in zip(keys, frames, strict=True) if " hidden" not in f]
    assert visible == ["G=2;beta=0"]
    assert "<script>" in html and "grpo-slider-demo-g" in html.split("<script>")[1]


def test_every_frame_is_a_distinct_png(view):
    pngs = list(view.frames.values())
    assert len(pngs) == 6 and len(set(pngs)) == 6
    assert all(p.startswith(b"\x89PNG") for p in pngs)


def test_mime_bundle_has_both_forms(view):
    bundle = view._repr_mimebundle_()
    assert bundle["text/html"] == view.html()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert bundle["text/plain"].startswith("<slider demo-g: G in [1, 2, 8]")


def test_live_widget_shows_the_frame_of_the_chosen_values(view):
    box = view.widget()
    image = box.children[-1]
    assert bytes(image.value) == view.frames["G=2;beta=0"]
    box.sliders["G"].value = 8
    assert bytes(image.value) == view.frames["G=8;beta=0"]
    box.sliders["beta"].value = 0.5
    assert bytes(image.value) == view.frames["G=8;beta=0.5"]
    box.sliders["G"].value = 2
    box.sliders["beta"].value = 0.0


def test_output_is_deterministic():
    a = viz.slider("same", {"G": [1, 2]}, lambda G: draw(G, 0.0))
    b = viz.slider("same", {"G": [1, 2]}, lambda G: draw(G, 0.0))
    assert a.html() == b.html()


@pytest.mark.parametrize("kwargs, word", [
    (dict(name="Bad Name"), "name"),
    (dict(params={}), "params"),
    (dict(params={"G": [1]}), "at least 2"),
    (dict(params={"beta": [0.1, 0.1000001]}), "fmt"),
    (dict(initial={"G": 3}), "initial"),
    (dict(params={"G": [1, 2]}, fmt={"G": "G={}"}), "must not contain"),
])
def test_bad_slider_definitions_are_refused(kwargs, word):
    args = dict(name="x", params={"G": [1, 2]}, draw=lambda **v: draw(v.get("G", 1), 0.0))
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        viz.slider(**args)


def test_moving_average_is_the_window_mean():
    import numpy as np
    y = np.random.default_rng(0).normal(size=(3, 20))
    got = viz.moving_average(y, 5)
    assert got.shape == (3, 16)
    np.testing.assert_allclose(got[:, 7], y[:, 7:12].mean(-1), rtol=1e-12)


def _decoded(png: bytes):
    import io

    from PIL import Image

    return Image.open(io.BytesIO(png))


def test_ink_box_is_the_box_of_non_background_pixels():
    import numpy as np

    rgba = np.full((10, 20, 4), 255, np.uint8)
    assert viz._ink_box(rgba, np.array([255, 255, 255, 255], np.uint8)) is None
    rgba[3, 5] = rgba[6, 12] = (0, 0, 0, 255)
    assert viz._ink_box(rgba, np.array([255, 255, 255, 255], np.uint8)) == (5, 3, 13, 7)


def test_frames_are_cropped_to_the_drawing_in_one_draw():
    viz.book_style()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend()
    draws = []
    fig.canvas.mpl_connect("draw_event", lambda _event: draws.append(1))
    image = _decoded(viz._png(fig, 80))  # 80 dpi: the 8-pt legend needs no higher dpi
    plt.close(fig)
    assert len(draws) == 1, "one draw per frame"
    assert image.mode == "P", "256-colour palette"
    w, h = image.size
    assert w < 4 * 80 and h < 3 * 80, "the white margin is cropped"
    pad = round(matplotlib.rcParams["savefig.pad_inches"] * 80)
    px = image.convert("RGB").load()
    assert all(px[x, y] == (255, 255, 255) for x in range(w) for y in range(pad - 1)), \
        "savefig.pad_inches of margin is kept"


def test_a_drawing_past_the_canvas_edge_is_not_cut_off():
    viz.book_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a legend outside the axes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    image = _decoded(viz._png(fig, 60))
    plt.close(fig)
    assert image.size[0] > 3 * 60, "savefig's tight box takes in the legend beyond the canvas"


def _outside_legend(label="a legend outside the axes"):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    return fig


def test_a_drawing_past_the_edge_drawn_tight_first_has_the_same_pixels_in_one_draw():
    import numpy as np

    viz.book_style()
    pngs, draws = {}, {}
    for first in (False, True):
        fig = _outside_legend()
        draws[first] = []
        fig.canvas.mpl_connect("draw_event", lambda _e, d=draws[first]: d.append(1))
        pngs[first], beyond = viz._png_beyond(fig, 60, tight_first=first)
        plt.close(fig)
        assert beyond, "the legend goes on beyond the canvas"
    a, b = (np.asarray(_decoded(pngs[k]).convert("RGB")) for k in (False, True))
    assert a.shape == b.shape and a.shape[1] > 3 * 60 and (a == b).all()
    assert len(draws[False]) == 2 and len(draws[True]) == 1, "tight first: one draw, into the box"


@pytest.mark.parametrize("case", ["inside", "constrained layout"])
def test_tight_first_gives_the_same_png(case):
    # inside: only the tick labels' boxes overhang the canvas, by a pixel; constrained layout:
    # the legend outside the axes is inside the canvas after the layout
    viz.book_style()
    pngs, beyonds = [], []
    for first in (False, True):
        if case == "inside":
            fig, ax = plt.subplots(figsize=(3, 2))
            ax.plot([0, 1], [0, 1], label="inside")
            ax.legend()
        else:
            fig = plt.figure(figsize=(3, 2), layout="constrained")
            ax = fig.subplots()
            ax.plot([0, 1], [0, 1], label="a legend outside the axes")
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
        png, beyond = viz._png_beyond(fig, 60, tight_first=first)
        plt.close(fig)
        pngs.append(png)
        beyonds.append(beyond)
    assert pngs[0] == pngs[1] and beyonds[0] == beyonds[1]
    assert beyonds[0] == (case == "inside")  # constrained layout: nothing beyond the canvas


def test_slider_frames_past_the_edge_are_each_frames_lone_png():
    viz.book_style()

    def draw(label):
        return _outside_legend(label=label)

    labels = ["short", "a much longer legend entry", "mid-sized one"]
    view = viz.slider("edge", {"label": labels}, draw, dpi=60)
    for label in labels:
        fig = draw(label)
        alone = viz._png(fig, 60)
        plt.close(fig)
        assert view.frames[view.frame_key({"label": label})] == alone, label


def test_inline_figures_use_the_single_draw_png():
    import base64

    viz.book_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    text = viz._inline_png(fig)
    assert isinstance(text, str) and _decoded(base64.b64decode(text)).mode == "P"
    plt.close(fig)
    empty = plt.figure()
    assert viz._inline_png(empty) is None, "an empty figure shows nothing, as in IPython"
    plt.close(empty)


def test_slider_inputs_are_disabled_until_its_script_enables_them(view):
    """Without its script (JupyterLab sanitizes an untrusted notebook's HTML) the slider is
    inert; tools/browser_check.py checks in Chromium that the script enables every input."""
    html = view.html()
    inputs = re.findall(r'<input type="range"[^>]*>', html)
    assert inputs and all(re.search(r"\sdisabled[\s>]", i) for i in inputs)
    script = html.split("<script>")[1]
    assert "inp.disabled = false" in script


def _text_px(png):
    return float(_decoded(png).text[viz.TEXT_PX_KEY])


@pytest.mark.parametrize("legend_pt, dpi", [(7, 72), (7.5, 60), (8, 72), (10, 80)])
def test_no_text_below_8_px_in_a_frame(legend_pt, dpi):
    """A frame's smallest text is at least 8 px high in its own pixels: the dpi is raised where
    a small font needs it, and the height reached is stored in the PNG (checked as shown, in
    Chromium, by tools/browser_check.py)."""
    viz.book_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(fontsize=legend_pt)
    ax.tick_params(labelsize=max(legend_pt, 9))
    png = viz._png(fig, dpi)
    plt.close(fig)
    px = _text_px(png)
    assert px >= viz.MIN_TEXT_PX - 1e-9
    assert px == pytest.approx(max(legend_pt * dpi / 72, viz.MIN_TEXT_PX), abs=0.01)


def test_a_raised_dpi_leaves_the_figures_own_dpi_and_repr():
    viz.book_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.legend(handles=ax.plot([0, 1], label="x"), fontsize=6)
    before = repr(fig)
    viz._inline_png(fig)
    assert repr(fig) == before and fig.dpi == 80
    plt.close(fig)


def test_table_aligns_text_and_writes_an_escaped_html_table():
    import numpy as np
    import pytest

    from grpo_core import viz

    t = viz.table(["mu", "name", "reward"], [[np.int64(1), "a<b", 5.4], [8, "long name", 5.51234]],
                  caption="cap", fmt="{:.3f}")
    lines = repr(t).splitlines()
    assert lines[0] == "cap" and lines[1].split() == ["mu", "name", "reward"]
    assert lines[3] == " 1  a<b         5.400" and lines[4] == " 8  long name   5.512"
    html = t._repr_html_()
    assert html.count("<tr>") == 3 and "a&lt;b" in html and "<caption>cap</caption>" in html
    assert 'style="text-align:right">5.512' in html and 'style="text-align:left">long name' in html
    with pytest.raises(ValueError, match="every row needs 3 cells"):
        viz.table(["a", "b", "c"], [[1, 2]])
