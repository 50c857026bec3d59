"""docs/sphinx_ext/book_weight.py: what it does to a page, on small pages (the real build is
checked by tools/check_build.py and tools/browser_check.py in CI)."""

import base64
import struct
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# two icons as FontAwesome 6's minified kit writes them: a quoted name with an alias, a bare name
KIT = ('(function(){var p={"magnifying-glass":[512,512,[128269,"search"],"f002","M1 2z"],'
       'github:[496,512,[],"f09b","M3 4z"]};d("fab",p)})();'
       '(function(){var p={"pencil":[512,512,[9999,61504,"pencil-alt"],"f303","M5 6z"],'
       'lightbulb:[384,512,[],"f0eb","M9 9z"],'
       'sun:[512,512,[9728],"f185","M7 8z"]};d("fas",p)})();')


@pytest.fixture(scope="module")
def bw():
    sys.path.insert(0, str(ROOT / "docs" / "sphinx_ext"))
    import book_weight

    yield book_weight
    sys.path.remove(str(ROOT / "docs" / "sphinx_ext"))


def png(width, height) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))


def test_icons_are_read_per_set_with_their_aliases(bw):
    icons = bw.read_icons(KIT)
    assert icons[("fab", "github")] == (496, 512, "M3 4z")
    assert icons[("fas", "pencil-alt")] == icons[("fas", "pencil")] == (512, 512, "M5 6z")
    assert ("fas", "github") not in icons and ("fab", "sun") not in icons


def test_icons_become_inline_svg_and_keep_their_attributes(bw):
    icons = bw.read_icons(KIT)
    page = ('<i class="fas fa-pencil-alt"></i><i class="theme-switch fa-solid fa-sun fa-lg" '
            'data-mode="light" aria-hidden="true"></i><i class="fas fa-unknown"></i>')
    new, missing = bw.inline_icons(page, icons)
    assert '<path d="M5 6z"/>' in new and '<path d="M7 8z"/>' in new
    assert 'class="grpo-icon theme-switch"' in new and 'data-mode="light"' in new
    assert new.count("aria-hidden") == 2 and "height:1.25em" in new
    assert missing == ["fas fa-unknown"] and '<i class="fas fa-unknown"></i>' in new


def test_images_get_their_size_reserved(bw, tmp_path):
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "a.png").write_bytes(png(640, 480))
    data = base64.b64encode(png(300, 200) + b"\0" * 40).decode()
    page = (f'<img src="_images/a.png" alt="a"><img src="data:image/png;base64,{data}" alt="b">'
            '<img src="x.svg" alt="c"><img width="5" src="_images/a.png">')
    new, count = bw.size_images(page, tmp_path)
    assert count == 2
    assert '<img width="640" height="480" src="_images/a.png"' in new
    assert '<img width="300" height="200" src="data:' in new
    assert '<img src="x.svg"' in new and '<img width="5" src' in new
    assert bw.size_images(new, tmp_path) == (new, 0)  # idempotent


HEAD = """<script src="../_static/documentation_options.js"></script>
<script src="../_static/doctools.js?v=1"></script>
<script>const THEBE_JS_URL = "https://x"; const thebe_selector = ".thebe"</script>
<script async="async" src="../_static/sphinx-thebe.js?v=2"></script>
<script>window.MathJax = {"options": {}}</script>
<script defer="defer" src="../_static/mathjax/tex-chtml.js"></script>
<script src="../_static/searchtools.js"></script>
<script src="../searchindex.js"></script>"""


def test_the_head_loads_less_and_defers_the_rest(bw):
    page = bw.lighten_head(HEAD, search_page=False)
    assert "searchindex.js" not in page and "searchtools.js" not in page
    assert "thebe" not in page.lower()
    assert '<script src="../_static/documentation_options.js">' in page  # read inline at once
    assert '<script defer src="../_static/doctools.js?v=1">' in page
    assert "mathjax/startup.js" in page and "tex-chtml" not in page
    assert '{"loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]}' in page
    assert "c.tabIndex = 0" in page  # display equations stay focusable without the menu
    assert bw.lighten_head(page, search_page=False) == page  # idempotent
    search = bw.lighten_head(HEAD, search_page=True)
    assert "searchindex.js" in search and "searchtools.js" in search


def test_the_theme_gets_a_valid_default_mode(bw):
    class Config:
        html_context = {}

    bw.config_inited(None, Config)
    assert Config.html_context["default_mode"] == "auto"


def test_spans_and_admonitions_use_no_icon_font(bw):
    icons = bw.read_icons(KIT)
    new, missing = bw.inline_icons('<span class="fa-solid fa-sun"></span>', icons)
    assert new.startswith("<svg") and not missing
    css = bw.admonition_css(icons)
    assert 'content:""!important' in css and "font:inherit!important" in css
    assert ".admonition.tip>.admonition-title:after" in css  # lightbulb is in KIT
    assert ".admonition.note>" not in css  # info-circle is not: left to the theme
    page = ('<link rel="stylesheet" type="text/css" href="../_static/grpo.css?v=1" />')
    linked = bw.link_icon_css(page)
    assert 'href="../_static/grpo-icons.css"' in linked and bw.link_icon_css(linked) == linked
