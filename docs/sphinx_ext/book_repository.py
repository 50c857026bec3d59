"""A local Sphinx extension: the site names the repository it is deployed from (loaded from
_config.yml).

The repository's address is set in one place, `_config.yml`'s `repository` (url, branch). The
launch buttons (Binder, Colab), the repository and "edit this page" buttons, the Binder badges
(tests/test_binder.py) and every chapter's hidden first cell, which installs grpo_core when a
notebook runs alone, as in Colab (tools/run_notebooks.py, tests/test_frame.py), all derive from it.
A notebook opened in Colab cannot learn at run time which repository it came from, so the
committed notebooks must name the right one: this extension makes the deployment check that.

The deploy workflow passes the repository it runs in and the site's address into the build:

- ``BOOK_REPOSITORY`` (``owner/name``, GitHub's ``github.repository``): if it is not the
  repository of `_config.yml`, the build fails and says what to change. A site whose buttons and
  notebooks send readers to another repository (or to the placeholder of a fresh fork) is never
  published.
- ``BOOK_SITE_URL`` (the GitHub Pages address): the site's base URL (``html_baseurl``), from which
  every page gets its canonical link.

Unset (a local build), nothing is checked and the build says so in its log.
"""

from __future__ import annotations

import os
import re

from sphinx.errors import ConfigError
from sphinx.util import logging

REPOSITORY_ENV = "BOOK_REPOSITORY"
SITE_URL_ENV = "BOOK_SITE_URL"

logger = logging.getLogger(__name__)


def configured_repository(config) -> str:
    """``owner/name`` of the repository the built site names (_config.yml's repository.url, which
    Jupyter Book hands to the theme as ``repository_url``)."""
    url = (getattr(config, "html_theme_options", None) or {}).get("repository_url", "")
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?/?", url or "")
    if not match:
        raise ConfigError(f"book_repository: _config.yml's repository.url is not a GitHub "
                          f"repository address: {url!r}")
    return match.group(1)


def check_repository(config, environ=os.environ) -> str:
    """Compare _config.yml's repository with ``BOOK_REPOSITORY``; set ``html_baseurl`` from
    ``BOOK_SITE_URL``. Returns a line for the build log; raises ConfigError on a mismatch."""
    named = configured_repository(config)
    site = environ.get(SITE_URL_ENV, "").strip()
    if site:
        config.html_baseurl = site.rstrip("/") + "/"
    deployed = environ.get(REPOSITORY_ENV, "").strip()
    if not deployed:
        return (f"book_repository: {REPOSITORY_ENV} not set (a local build): the launch buttons "
                f"and the chapters' first cells name https://github.com/{named}, unchecked")
    if deployed.lower() != named.lower():
        raise ConfigError(
            f"book_repository: this site is built in {deployed}, but _config.yml names "
            f"https://github.com/{named}: its launch buttons, Binder badges and every chapter's "
            f"first cell (which installs grpo_core in Colab) would send readers there. Set "
            f"repository.url in _config.yml to https://github.com/{deployed} (and "
            f"repository.branch), update the Binder badges of README.md and book/intro.md and "
            f"[project.urls] in pyproject.toml, then run "
            f"`python tools/run_notebooks.py --refresh-first-cell` and commit.")
    return (f"book_repository: built in {deployed}, as _config.yml names"
            + (f"; site {config.html_baseurl}" if site else ""))


def config_inited(app, config) -> None:
    logger.info(check_repository(config))


def setup(app):
    app.connect("config-inited", config_inited)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
