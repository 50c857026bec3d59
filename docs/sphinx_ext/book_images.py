"""A local Sphinx extension for the book's static figures (loaded from _config.yml).

- Alt text: a notebook figure without one (myst-nb takes it from the cell metadata
  ``{"mystnb": {"image": {"alt": "..."}}}``) would otherwise read its hashed file path to a screen
  reader; it gets "Figure: <section title> (<page title>)" instead. The cell metadata wins.
- Weight: after the build, every PNG under ``_images/`` is re-encoded as a 256-colour palette PNG
  where that is smaller (about a third of the bytes for these flat-colour plots). The notebooks
  keep their stored PNGs; only the site's copies change. The slider frames are palette PNGs already
  (``grpo_core.viz._png``).
"""

from __future__ import annotations

import io
from pathlib import Path

from docutils import nodes


def _title(node) -> str | None:
    for child in node.children:
        if isinstance(child, nodes.title):
            return child.astext()
    return None


def add_alt_text(app, doctree, docname) -> None:
    page = None
    for section in doctree.findall(nodes.section):
        page = _title(section)
        break
    for image in doctree.findall(nodes.image):
        if image.get("alt"):
            continue
        section = image.parent
        while section is not None and not isinstance(section, nodes.section):
            section = section.parent
        where = _title(section) if section is not None else None
        if where and page and where != page:
            image["alt"] = f"Figure: {where} ({page})"
        else:
            image["alt"] = f"Figure: {where or page or docname}"


def palette_pngs(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    from PIL import Image, PngImagePlugin

    before = after = 0
    for path in sorted(Path(app.outdir, "_images").glob("*.png")):
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            if im.mode == "P":
                continue
            out = io.BytesIO()
            info = PngImagePlugin.PngInfo()  # keep the text chunks (grpo_core.viz's text size)
            for key, value in getattr(im, "text", {}).items():
                info.add_text(key, value)
            im.convert("RGB").quantize(256).save(out, "PNG", optimize=True, pnginfo=info)
        before += len(data)
        if out.tell() < len(data):
            path.write_bytes(out.getvalue())
            after += out.tell()
        else:
            after += len(data)
    if before:
        print(f"book_images: _images/*.png {before / 1e3:.0f} KB -> {after / 1e3:.0f} KB "
              "(256-colour palette)")


def setup(app):
    app.connect("doctree-resolved", add_alt_text)
    app.connect("build-finished", palette_pngs)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
