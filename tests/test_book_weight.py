"""docs/sphinx_ext/book_weight.py: what it does to a page, on small pages (the real build is
checked by tools/check_build.py and tools/browser_check.py in CI)."""

import base64
import re
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


def frame_tag(key: str, data: bytes, hidden: bool) -> str:
    b64 = base64.b64encode(data).decode()
    return (f'<img class="grpo-slider-frame" data-key="{key}" alt="f ({key})"'
            + (' hidden="hidden"' if hidden else "") + f' src="data:image/png;base64,{b64}">')


def test_slider_frames_become_files_and_hidden_ones_load_when_shown(bw):
    a, b = png(4, 3) + b"a", png(4, 3) + b"b"
    page = ('<div class="grpo-slider">' + frame_tag("x=1", a, False) + frame_tag("x=2", b, True)
            + frame_tag("x=3", a, True) + '</div><img src="data:image/png;base64,AAAA" alt="n">')
    new, files = bw.frame_files(page, "../")
    assert sorted(files.values()) == sorted([a, b])  # one file per distinct picture
    assert all(name.startswith("grpo-frame-") and name.endswith(".png") for name in files)
    first, second, third = re.findall(r"<img\b[^>]*grpo-slider-frame[^>]*>", new)
    name_a = next(n for n, d in files.items() if d == a)
    assert f'src="../_images/{name_a}"' in first and f'src="../_images/{name_a}"' in third
    assert "loading=" not in first  # the frame shown first loads with the page
    assert 'loading="lazy"' in second and 'loading="lazy"' in third  # the others when shown
    assert 'data-key="x=2"' in second and 'hidden="hidden"' in second
    assert 'src="data:image/png;base64,AAAA"' in new  # not a slider frame: left inline
    assert bw.frame_files(new, "../") == (new, {})  # idempotent


# --- book_math: math rendered at build time ---------------------------------------------------

@pytest.fixture(scope="module")
def bm():
    sys.path.insert(0, str(ROOT / "docs" / "sphinx_ext"))
    import book_math

    yield book_math
    sys.path.remove(str(ROOT / "docs" / "sphinx_ext"))


MATH_HEAD = ('<link rel="stylesheet" type="text/css" href="../_static/grpo.css" />\n'
             '<script>window.MathJax = {"loader": {"load": ["input/tex"]}, "options": {}}</script>'
             '<script>MathJax.startup = {pageReady: () => 1};</script>\n'
             '<script defer="defer" src="../_static/mathjax/startup.js"></script>\n</head>')
MATH_BODY = ('<p>Ratio <span class="math notranslate nohighlight">\\(r &lt; 1\\)</span> and '
             '<span class="math notranslate nohighlight">\\(\\pi\\)</span>.</p>\n'
             '<div class="math notranslate nohighlight" id="equation-eq-a">\n<span class="eqno">'
             '(1.1)<a class="headerlink" href="#equation-eq-a">#</a></span>\\[\nJ = \\pi\n\\]'
             '</div>\n<div class="math notranslate nohighlight">\n\\begin{align}a &amp;= b'
             '\\end{align}</div>')


DISPLAY = ' display="true"'


def fake_render(pages):
    """A stand-in for tools/mathjax/render.js: markup that names the TeX it was given."""
    return {"version": "3.2.2", "pages": [{
        "html": [f'<mjx-container class="MathJax" jax="CHTML"{DISPLAY * d}>[{tex}]</mjx-container>'
                 for tex, d in p["items"]],
        "css": (f"/* a comment */\nmjx-c {{\n  display: inline-block;\n}}\n\n@font-face /* 1 */ {{"
                f'\n  src: url("{p["fontURL"]}/Main.woff");\n}}\n'),
        "errors": []} for p in pages]}


def test_math_is_found_with_its_kind_and_unescaped(bm):
    assert bm.find_math(MATH_BODY) == [("r < 1", False), ("\\pi", False), ("\nJ = \\pi\n", True),
                                       ("\\begin{align}a &= b\\end{align}", True)]


def test_math_is_replaced_and_the_equation_number_kept(bm):
    rendered = {item: f'<mjx-container class="MathJax"{DISPLAY * item[1]}>#{i}</mjx-container>'
                for i, item in enumerate(bm.find_math(MATH_BODY))}
    new, n = bm.replace_math(MATH_BODY, rendered)
    assert n == 4 and "\\(" not in new and "\\[" not in new and "\\begin" not in new
    assert '<span class="eqno">(1.1)<a class="headerlink" href="#equation-eq-a">#</a></span>' in new
    assert '<span class="math notranslate nohighlight"><mjx-container class="MathJax">#0' in new
    # display equations stay reachable from the keyboard (one wider than the column scrolls)
    assert new.count('<mjx-container tabindex="0" class="MathJax" display="true">') == 2
    partial, n = bm.replace_math(MATH_BODY, dict(list(rendered.items())[:1]))
    assert n == 1 and "\\(\\pi\\)" in partial  # what the renderer did not return stays TeX


def test_pages_lose_mathjax_and_get_its_stylesheet(bm, tmp_path):
    page = f"<html><head>{MATH_HEAD}<body>{MATH_BODY}</body></html>"
    plain = "<html><head></head><body><p>no math</p></body></html>"
    pages = {tmp_path / "book" / "a.html": page, tmp_path / "index.html": plain}
    changed, summary = bm.render_pages(tmp_path, pages, fake_render, "")
    assert list(changed) == [tmp_path / "book" / "a.html"] and "on 1 pages" in summary
    new = changed[tmp_path / "book" / "a.html"]
    assert "MathJax =" not in new and "startup.js" not in new and "MathJax.startup" not in new
    assert "[r < 1]" in new and "[\nJ = \\pi\n]" in new
    style = re.search(r'<style id="MJX-CHTML-styles">(.*?)</style>\s*</head>', new, re.S)
    assert style, "MathJax's stylesheet goes last in the head, where MathJax put it"
    # the fonts' URL is relative to the page; the CSS is minified; x-heights are matched
    assert 'url("../_static/mathjax/output/chtml/fonts/woff-v2/Main.woff")' in style.group(1)
    assert "mjx-c{display: inline-block;}@font-face{src:" in style.group(1)
    assert "/*" not in style.group(1)
    assert bm.MATCH_FONT_HEIGHT in style.group(1)
    assert bm.render_pages(tmp_path, {tmp_path / "book" / "a.html": new}, fake_render, "")[0] == {}


def test_without_node_the_pages_keep_mathjax_and_the_build_says_so(bm, tmp_path):
    page = f"<html><head>{MATH_HEAD}<body>{MATH_BODY}</body></html>"
    changed, summary = bm.render_pages(tmp_path, {tmp_path / "a.html": page}, None, "no `node`")
    assert changed == {} and "NOT rendered" in summary and "no `node`" in summary

    def broken(pages):
        raise bm.subprocess.CalledProcessError(1, "node", stderr="SyntaxError: boom")

    changed, summary = bm.render_pages(tmp_path, {tmp_path / "a.html": page}, broken, "")
    assert changed == {} and "boom" in summary

    def lossy(pages):  # a renderer that returns TeX unchanged for one expression
        reply = fake_render(pages)
        reply["pages"][0]["html"][1] = "\\(\\pi\\)"
        return reply

    changed, summary = bm.render_pages(tmp_path, {tmp_path / "a.html": page}, lossy, "")
    assert changed == {} and "left to the browser: a.html" in summary


def test_the_fonts_a_page_needs_are_read_from_its_stylesheet(bm):
    css = ('.TEX-I{font-family: MJXZERO, MJXTEX-I;}.TEX-S1{font-family: MJXZERO, MJXTEX-S1;}'
           '@font-face /* 0 */{font-family: MJXZERO;src: url("f/Zero.woff") format("woff");}'
           '@font-face /* 1 */{font-family: MJXTEX;src: url("f/Main.woff") format("woff");}'
           '@font-face /* 3 */{font-family: MJXTEX-I;src: url("f/Italic.woff") format("woff");}'
           '@font-face /* 6 */{font-family: MJXTEX-S1;src: url("f/Size1.woff") format("woff");}')
    assert bm.font_files(css) == {"TEX-I": "f/Italic.woff", "TEX-S1": "f/Size1.woff",
                                  "": "f/Main.woff", "ZERO": "f/Zero.woff"}
    page = (f'<style id="MJX-CHTML-styles">{css}</style><mjx-c class="mjx-c1D70B TEX-I"></mjx-c>'
            '<mjx-c class="mjx-c28"></mjx-c>')
    assert bm.fonts_used(page) == {"f/Italic.woff", "f/Main.woff", "f/Zero.woff"}
    assert bm.fonts_used("<p>no math</p>") == set()


def test_mathjax_in_node_renders_as_the_browser_did(bm):
    """tools/mathjax/render.js itself (needs `npm ci --prefix tools/mathjax`, as CI runs)."""
    render, why = bm.node_renderer()
    if render is None:
        pytest.skip(why)
    reply = render([{"fontURL": "F", "items": [["x_1", False], ["\\frac{a}{", True]]},
                    {"fontURL": "G", "items": [["x_1^2", False]]}])
    assert reply["version"] == "3.2.2"
    one, two = reply["pages"]
    ok, bad = one["html"]
    assert ok.startswith('<mjx-container class="MathJax" jax="CHTML"') and "<mjx-msub>" in ok
    assert "<mjx-assistive-mml" in ok and "<math " in ok  # hidden MathML for screen readers
    assert "font-size" not in ok[:120]  # the scale is mathjax-chtml's CSS rule, not inline
    assert "<mjx-merror" in bad and one["errors"] == [[1, "Missing close brace"]]
    assert 'url("F/MathJax_Main-Regular.woff")' in one["css"]
    # each page gets only the rules of what it uses, as MathJax does in the browser
    assert "mjx-script {" not in one["css"] and "mjx-script {" in two["css"]


# --- tools/check_build.py: what a first visit to a page transfers -----------------------------

@pytest.fixture(scope="module")
def cb():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_build", ROOT / "tools" / "check_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_first_visit_counts_what_the_page_loads_and_not_hidden_frames(cb, tmp_path):
    site = tmp_path / "html"
    (site / "_static").mkdir(parents=True)
    (site / "_images").mkdir()
    (site / "book").mkdir()
    (site / "_static" / "a.css").write_text('@import url("b.css");\nbody{}', encoding="utf-8")
    (site / "_static" / "b.css").write_text("p{color:red}" * 50, encoding="utf-8")
    (site / "_static" / "s.js").write_text("var x = 1;" * 100, encoding="utf-8")
    (site / "_static" / "unused.js").write_text("y" * 5000, encoding="utf-8")
    (site / "_images" / "f1.png").write_bytes(b"1" * 1000)
    (site / "_images" / "f2.png").write_bytes(b"2" * 7000)
    (site / "_images" / "fig.png").write_bytes(b"3" * 3000)
    page = site / "book" / "p.html"
    page.write_text(
        '<html><head><link rel="stylesheet" href="../_static/a.css?v=1" />'
        '<link rel="prefetch" href="../_static/unused.js" />'
        '<script defer src="../_static/s.js"></script></head><body>'
        '<img class="grpo-slider-frame" src="../_images/f1.png">'
        '<img class="grpo-slider-frame" loading="lazy" hidden="hidden" src="../_images/f2.png">'
        '<img src="../_images/fig.png" loading="lazy"><img src="https://example.org/x.png">'
        "</body></html>", encoding="utf-8")
    w = cb.first_visit(site, page)
    gz = cb.gz_size
    assert w["html"] == gz(page.read_bytes())
    assert w["css"] == sum(gz((site / "_static" / f).read_bytes()) for f in ("a.css", "b.css"))
    assert w["js"] == gz((site / "_static" / "s.js").read_bytes())  # not the prefetched one
    assert w["images"] == 1000 + 3000  # the hidden lazy frame loads only when shown
    assert w["fonts"] == 0 and w["other"] == 0


def test_client_side_math_is_named(cb, tmp_path):
    (tmp_path / "a.html").write_text(
        '<script defer src="_static/mathjax/startup.js"></script>', encoding="utf-8")
    (tmp_path / "b.html").write_text("<mjx-container></mjx-container>", encoding="utf-8")
    assert cb.client_math(tmp_path) == ["a.html"]


def test_the_themes_load_time_tab_stop_pass_is_dropped(bw):
    # pydata-sphinx-theme 0.17's minified script, cut down: grpo.js does this pass instead
    theme = ('function I(){const e=()=>{document.querySelectorAll(["pre"].join(", ")).forEach('
             'e=>{e.tabIndex=e.scrollWidth>e.clientWidth||e.scrollHeight>e.clientHeight?0:-1})}'
             ';e()}function J(){x()}(()=>{a(J),"complete"===document.readyState?I():'
             'window.addEventListener("load",I)})();')
    script, found = bw.drop_theme_tab_stops(theme)
    assert found and script.endswith("(()=>{a(J),void 0})();") and "function I()" in script
    other = theme.replace('"load",I)', '"load",J)').replace("readyState?I()", "readyState?J()")
    assert bw.drop_theme_tab_stops(other) == (other, False)  # J sets no tab stops: kept
