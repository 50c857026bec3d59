"""The browser check's pure parts (the browser run itself is a step of .ci/run)."""

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location("browser_check",
                                                  ROOT / "tools" / "browser_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "tools"))  # it imports check_build, as when run as a script
    sys.modules.setdefault("browser_check", module)  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("sizes,start", [
    ({"k": 3}, {"k": 0}),
    ({"k": 4}, {"k": 2}),
    ({"G": 4, "beta": 3}, {"G": 2, "beta": 1}),
    ({"a": 2, "b": 3, "c": 2}, {"a": 1, "b": 2, "c": 0}),
])
def test_walk_shows_every_frame_and_returns(bc, sizes, start):
    params = list(sizes)
    state, seen = dict(start), {tuple(start.values())}
    for p, v in bc.walk(params, sizes, start):
        assert v != state[p] and 0 <= v < sizes[p], "every move changes one value"
        state[p] = v
        seen.add(tuple(state[q] for q in params))
    assert seen == set(itertools.product(*(range(n) for n in sizes.values())))
    assert state == start


def test_toc_files_reads_root_parts_chapters_and_sections(bc):
    toc = {"format": "jb-book", "root": "book/intro",
           "parts": [{"caption": "A", "chapters": [
               {"file": "book/01_a.ipynb", "sections": [{"file": "book/01b"}]},
               {"file": "book/02_b"}]}]}
    assert bc.toc_files(toc) == ["book/intro", "book/01_a", "book/01b", "book/02_b"]


def test_width_below_a_phone_is_refused(bc):
    with pytest.raises(SystemExit):
        bc.main(["--width", "100"])


def test_phone_width_checks_are_set_for_a_390_px_window(bc):
    assert 390 <= bc.PHONE_WIDTH < bc.VIEWPORT["width"]
    assert 0.5 < bc.MIN_PHONE_SCALE <= 1.0


def test_png_text_reads_the_text_size_grpo_core_records(bc):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_core import viz

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.set_title("t", fontsize=6)
    png = viz._png(fig, 72)
    plt.close(fig)
    assert bc.TEXT_PX_KEY == viz.TEXT_PX_KEY and bc.MIN_TEXT_PX == viz.MIN_TEXT_PX
    assert float(bc.png_text(png)[bc.TEXT_PX_KEY]) == pytest.approx(8.0)
    assert bc.png_text(png[:8]) == {}


def test_axe_fails_on_serious_and_critical_only_and_upstream_is_narrow(bc):
    assert bc.AXE_FAILING_IMPACTS == ("serious", "critical")
    for rule, rx, why in bc.AXE_UPSTREAM:  # each entry names one rule and a specific selector
        assert rule and why and rx not in ("", ".*", ".")


def test_control_characters_in_notebook_sources_are_found(bc, tmp_path):
    import json

    book = tmp_path
    (book / "book").mkdir()
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["ok $\\beta$\n", "fine"]},
             {"cell_type": "markdown", "metadata": {}, "source": "a $\x08eta > 0$ b"}]
    (book / "book" / "ch.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    (book / "book" / "intro.md").write_text("tab\tand newline\n are fine\r\n", encoding="utf-8")
    found = bc.source_control_chars(book, ["book/intro", "book/ch"])
    assert len(found) == 1 and "cell 1, line 1" in found[0] and "\\x08" in found[0]


def test_the_books_sources_have_no_control_characters(bc):
    toc = bc.yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert bc.source_control_chars(ROOT, bc.toc_files(toc)) == []


def test_a_display_equation_must_fit_its_box_at_desktop_width(bc):
    # measures as JS_WIDE returns them (CSS px), in an 824 px column
    fits = {"width": 700, "box": 780, "content": 780, "what": "eq-fits: a = b"}
    in_box = {"width": 790, "box": 780, "content": 790, "what": "eq-scrolls: (1.10)"}
    too_wide = {"width": 900, "box": 780, "content": 900, "what": "eq-wide"}
    assert bc.equation_failures([fits], 824) == []
    assert bc.equation_failures([{**fits, "content": 781}], 824) == []  # a rounding pixel
    [msg] = bc.equation_failures([fits, in_box], 824)
    assert "scrolls in its box" in msg and "790 px" in msg and "eq-scrolls" in msg
    [msg] = bc.equation_failures([too_wide], 824)
    assert "900 px wide in a 824 px column" in msg
