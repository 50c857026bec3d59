"""docs/sphinx_ext/book_css.py: the site-wide CSS purge, on a small synthetic site (the real build
is checked by tools/check_build.py and tools/browser_check.py, and by screenshots)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bc():
    sys.path.insert(0, str(ROOT / "docs" / "sphinx_ext"))
    import book_css

    yield book_css
    sys.path.remove(str(ROOT / "docs" / "sphinx_ext"))


def used(bc, html="", js=""):
    u = bc.Used()
    u.add_html(html)
    u.add_script(js)
    return u


def test_css_is_split_into_statements_past_strings_and_comments(bc):
    css = bc.strip_comments('/* a { } */a[title="}{;"]{x:1}/*! keep */@import "b.css";'
                            "@media (x){b{y:2}}")
    assert bc.blocks(css) == [('a[title="}{;"]', "x:1"), ("/*! keep */", None),
                              ('@import "b.css"', None), ("@media (x)", "b{y:2}")]
    assert bc.split_selectors('a, b:is(.c, .d), [x=","]') == ["a", "b:is(.c, .d)", '[x=","]']


def test_selectors_that_need_a_missing_class_or_id_are_dropped(bc):
    u = used(bc, html='<p class="kept also" id="here"></p>')
    assert bc.can_match("p.kept", u) and bc.can_match("#here .also", u)
    assert not bc.can_match(".kept .gone", u) and not bc.can_match("#elsewhere", u)
    # no class needed: elements, attributes, pseudos, the root's custom properties
    for sel in ("html[data-theme=dark]", "a:hover", "body>div", ":root", "*", "::selection"):
        assert bc.can_match(sel, u), sel
    # a class inside :not()/:is() or an attribute selector is not needed for a match
    assert bc.can_match("p:not(.gone)", u) and bc.can_match('a[href$=".gone"]', u)
    assert bc.can_match(r".md\:gone", u)  # escaped names are kept, not parsed


def test_purge_keeps_what_can_match_and_recurses_into_media(bc):
    u = used(bc, html='<div class="a b"></div>')
    css = (":root{--x:1}.a{c:1}.gone{c:2}.a,.gone{c:3}@media (max-width:9px){.b{c:4}.gone{c:5}}"
           "@media print{.gone{c:6}}@supports (x:y){@media (z){.a .gone{c:7}}}"
           "@font-face{font-family:F}@keyframes k{0%{o:0}to{o:1}}")
    assert bc.purge(css, u).split("\n") == [
        ":root{--x:1}", ".a{c:1}", ".a{c:3}", "@media (max-width:9px){.b{c:4}}",
        "@font-face{font-family:F}", "@keyframes k{0%{o:0}to{o:1}}"]


def test_a_list_with_a_vendor_pseudo_is_kept_whole(bc):
    u = used(bc, html='<input class="a">')
    css = ".gone::-moz-placeholder,.a::placeholder{c:1}.gone::placeholder,.a::placeholder{c:2}"
    assert bc.purge(css, u).split("\n") == [
        ".gone::-moz-placeholder,.a::placeholder{c:1}", ".a::placeholder{c:2}"]


def test_classes_the_scripts_add_are_kept(bc):
    js = ('e.classList.add("show");t.classList.toggle("toggle-hidden");'
          'n.className="bs-"+name+"-auto";m.classList.add(`kind-${kind}`);')
    u = used(bc, html='<div class="a"></div>', js=js)
    css = ".a.show{c:1}.toggle-hidden{c:2}.bs-tooltip-auto{c:3}.kind-title{c:4}.hidden{c:5}"
    assert bc.purge(css, u).split("\n") == [".a.show{c:1}", ".toggle-hidden{c:2}",
                                            ".bs-tooltip-auto{c:3}", ".kind-title{c:4}"]
    inline = used(bc, html='<script>document.body.classList.add("late")</script>')
    assert inline.has("late") and not inline.has("hidden")


def test_urls_are_rebased_to_the_combined_file(bc):
    css = ('a{b:url(../vendor/f.woff2)}c{d:url("x.png")}e{f:url(data:image/png;base64,AA)}'
           "g{h:url('https://x.org/y.png')}")
    assert bc.rebase_urls(css, "_static/styles", "_static") == (
        'a{b:url("vendor/f.woff2")}c{d:url("styles/x.png")}e{f:url(data:image/png;base64,AA)}'
        "g{h:url('https://x.org/y.png')}")


def test_a_site_gets_one_purged_stylesheet_in_the_links_place(bc, tmp_path):
    static = tmp_path / "_static"
    (static / "styles").mkdir(parents=True)
    (static / "styles" / "theme.css").write_text(
        '@import "../basic.css";\n.used{a:url(../i.png)}.unused{b:1}', encoding="utf-8")
    (static / "basic.css").write_text("/* base */ p{c:1} .nowhere{d:1}", encoding="utf-8")
    (static / "own.css").write_text(".open{e:1}.shut{f:1}.indexword{g:1}", encoding="utf-8")
    (static / "theme.js").write_text('x.classList.add("open")', encoding="utf-8")
    # the search index is data (every word of the site), not a script that sets classes
    (tmp_path / "searchindex.js").write_text('Search.setIndex({"terms":{"indexword":[0]}})',
                                             encoding="utf-8")
    head = ('<link href="{r}_static/styles/theme.css?digest=1" rel="stylesheet" />\n'
            '    <link rel="stylesheet" type="text/css" href="{r}_static/own.css?v=2" />\n'
            '<link rel="stylesheet" href="https://cdn.example/x.css" />\n'
            '<script defer src="{r}_static/theme.js"></script>'
            '<script defer src="{r}searchindex.js"></script>')
    (tmp_path / "book").mkdir()
    pages = {tmp_path / "index.html": head.format(r="") + '<p class="used"></p>',
             tmp_path / "book" / "ch.html": head.format(r="../") + '<p id="x"></p>'}
    for path, text in pages.items():
        path.write_text(text, encoding="utf-8")

    class App:
        outdir = str(tmp_path)

        class builder:
            format = "html"

    bc.purge_site_css(App, None)
    files = sorted(static.glob("book-*.css"))
    assert len(files) == 1
    assert files[0].read_text(encoding="utf-8").split("\n") == [
        "p{c:1}", '.used{a:url("i.png")}', ".open{e:1}"]
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    chapter = (tmp_path / "book" / "ch.html").read_text(encoding="utf-8")
    assert index.startswith(f'    <link rel="stylesheet" type="text/css" '
                            f'href="_static/{files[0].name}" />\n')
    assert f'href="../_static/{files[0].name}"' in chapter
    for page in (index, chapter):
        assert "theme.css" not in page and "own.css" not in page
        assert 'href="https://cdn.example/x.css"' in page  # another host's: left alone
