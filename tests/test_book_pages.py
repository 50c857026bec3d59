"""The local Sphinx extension docs/sphinx_ext/book_pages.py, on the theme's own markup (the
built pages are checked in Chromium, with axe-core, by tools/browser_check.py)."""

import importlib.util
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_doctree

ROOT = Path(__file__).resolve().parent.parent

# Verbatim from a page built with jupyter-book 1.0.4.post1 (pydata-sphinx-theme, myst-nb).
SUMMARY = """<summary aria-label="Toggle hidden content">
<p class="collapsed admonition-title">Show code cell source</p>"""
SEARCH = """<button class="btn search-button-field search-button__button pst-js-only" \
title="Search" aria-label="Search" data-bs-placement="bottom" data-bs-toggle="tooltip">
 <span class="search-button__default-text">Search</span>"""
SEARCH_ICON = """<button class="btn btn-sm pst-navbar-icon search-button search-button__button \
pst-js-only" title="Search" aria-label="Search" data-bs-placement="bottom">"""
THEME = """<button class="btn btn-sm nav-link pst-navbar-icon theme-switch-button pst-js-only" \
aria-label="Color mode" data-bs-title="Color mode"  data-bs-placement="bottom">
  <i class="theme-switch fa-solid fa-sun                fa-lg" data-mode="light" \
title="Light"></i>
  <i class="theme-switch fa-solid fa-moon               fa-lg" data-mode="dark"  \
title="Dark"></i>"""


@pytest.fixture(scope="module")
def ext():
    spec = importlib.util.spec_from_file_location(
        "book_pages", ROOT / "docs" / "sphinx_ext" / "book_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_toggles_and_search_field_are_named_by_their_visible_text(ext):
    page = "\n".join([SUMMARY, SEARCH, SEARCH_ICON, THEME])
    fixed, counts = ext.fix_accessible_names(page)
    assert "Toggle hidden content" not in fixed and "<summary>\n<p" in fixed
    field, icon = fixed.split("\n<button")[1:3]
    assert 'aria-label="Search"' not in field and "Search</span>" in field
    assert 'aria-label="Search"' in icon  # an icon-only button keeps its name
    assert 'aria-label="Color mode"' in fixed
    assert 'title="Light"' not in fixed and 'title="Dark"' not in fixed
    assert fixed.count('aria-hidden="true"') == 2
    assert sorted(counts.values()) == [1, 1, 2]
    assert ext.fix_accessible_names(fixed)[0] == fixed  # idempotent


def test_every_inline_script_is_written_once(ext):
    from sphinx.builders.html._assets import _JavaScript

    thebe = 'const THEBE_JS_URL = "https://unpkg.com/thebe@0.8.2/lib/index.js"'
    scripts = [_JavaScript(None, body=thebe), _JavaScript("sphinx-thebe.js", async_="async"),
               _JavaScript("", body=thebe), _JavaScript("grpo.js")]
    context = {"script_files": scripts, "metatags": ""}
    ext.page_context(None, "book/intro", "page.html", context, None)
    assert [js.filename for js in context["script_files"]] == [None, "sphinx-thebe.js", "grpo.js"]
    assert context["script_files"] is scripts  # in place: Sphinx renders from this list


def test_meta_description_is_the_first_prose_in_plain_text(ext):
    doctree = publish_doctree(
        "Title\n=====\n\n.. note:: An aside, not the description.\n\n"
        "The group size :math:`G` and the leash :math:`\\beta\\,\\mathrm{KL}` decide "
        + "everything here. " * 12 + "\n")
    text = ext.description(doctree)
    assert text.startswith("The group size G and the leash beta KL decide everything here.")
    assert len(text) <= ext.DESCRIPTION_CHARS and text.endswith("\u2026")
    context = {"script_files": [], "metatags": '<meta charset="utf-8" />'}
    ext.page_context(None, "book/x", "page.html", context, doctree)
    assert context["metatags"].count('<meta name="description" content="The group size G') == 1
    own = {"script_files": [], "metatags": '<meta name="description" content="Own." />'}
    ext.page_context(None, "book/x", "page.html", own, doctree)
    assert own["metatags"] == '<meta name="description" content="Own." />'  # the page's wins


def test_the_site_has_a_favicon_and_loads_the_extension():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    favicon = ROOT / config["html"]["favicon"]
    assert favicon.is_file() and favicon.read_text(encoding="utf-8").startswith("<svg")
    assert config["sphinx"]["local_extensions"]["book_pages"] == "docs/sphinx_ext"
