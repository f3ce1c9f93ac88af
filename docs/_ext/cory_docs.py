"""Sphinx directives that render the project's own sources into the site, so that nothing is copied by hand.

* ``{moduledoc} MODULE``: a module's docstring, written in Markdown (the PettingZoo-style cards), rendered by MyST.
  Warnings name the ``.py`` file and the line inside it.
* ``{apipackage} PACKAGE``: a package's API reference: its docstring, then every public module (its docstring and
  autodoc of its members), in file order, found by walking the package (a new module appears without an edit).
* ``{optionstables}``: the option tables that ``docs/options_table.py`` prints, built from the config dataclasses.

autodoc renders class and function docstrings (Google style, through napoleon); module docstrings are left to
``moduledoc`` (the ``autodoc-process-docstring`` hook below drops them from autodoc's output).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

DOCS = Path(__file__).resolve().parents[1]
REPO = DOCS.parent


def module_docstring(name: str) -> tuple[str, Path, int]:
    """The module's docstring (cleaned like `inspect.cleandoc`), its source file and the 1-based line of the
    docstring's first text line."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ValueError(f"no module {name!r}")
    path = Path(spec.origin)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if not (tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant)
            and isinstance(tree.body[0].value.value, str)):
        raise ValueError(f"{path}: module {name} has no docstring")
    raw = tree.body[0].value.value
    leading = len(raw) - len(raw.lstrip("\n"))
    return inspect.cleandoc(raw), path, tree.body[0].lineno + leading


def _min_heading_level(text: str) -> int | None:
    levels = []
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"^(#{1,6}) ", line)):
            levels.append(len(match.group(1)))
    return min(levels) if levels else None


def render_markdown(directive: SphinxDirective, text: str, source: str, first_line: int, *,
                    heading_level: int | None = None) -> None:
    """Render Markdown `text` with MyST into the current document where the directive stands (headings open
    sections of the page, as MyST's ``include`` does), its warnings located in `source` from `first_line` on; the
    shallowest heading becomes `heading_level` (None: as written)."""
    renderer = directive.state._renderer  # MyST's: these directives sit in Markdown pages
    offset = 0
    if heading_level is not None and (top := _min_heading_level(text)) is not None:
        offset = heading_level - top
    doc_source, rep_source = renderer.document["source"], renderer.reporter.source
    line_func = getattr(renderer.reporter, "get_source_and_line", None)
    try:
        renderer.document["source"] = source
        renderer.reporter.source = source
        renderer.reporter.get_source_and_line = lambda li: (source, li)
        renderer.nested_render_text(text, first_line - 1, heading_offset=offset)
    finally:
        renderer.document["source"], renderer.reporter.source = doc_source, rep_source
        if line_func is not None:
            renderer.reporter.get_source_and_line = line_func
        else:
            del renderer.reporter.get_source_and_line


class ModuleDoc(SphinxDirective):
    """``{moduledoc} MODULE`` with option ``:heading-level: N`` (the docstring's shallowest heading becomes N)."""

    required_arguments = 1
    option_spec = {"heading-level": directives.positive_int}

    def run(self) -> list[nodes.Node]:
        text, path, line = module_docstring(self.arguments[0])
        self.env.note_dependency(str(path))
        render_markdown(self, text, str(path), line, heading_level=self.options.get("heading-level"))
        return []


def is_package(name: str) -> bool:
    """Whether module `name` is a package, found without importing it: a module that imports an optional library
    (``trainers.adapters.sb3``: sb3-contrib, an extra) is documented through autodoc's mocks (``autodoc_mock_imports``,
    docs/conf.py), so the site builds from the README's install alone."""
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def public_modules(package: str) -> list[str]:
    """`package` and its modules and subpackages, depth first, in name order; private ones (``_x``) and
    ``__main__`` left out."""
    pkg = importlib.import_module(package)
    out = [package]
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: (i.ispkg, i.name)):
        if info.name.startswith("_"):
            continue
        name = f"{package}.{info.name}"
        out.extend(public_modules(name) if info.ispkg else [name])
    return out


class APIPackage(SphinxDirective):
    """``{apipackage} PACKAGE`` with option ``:elsewhere: MODULE=DOC ...`` (modules whose docstring is a page of
    its own: the reference links there instead of repeating it)."""

    required_arguments = 1
    option_spec = {"elsewhere": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        elsewhere = dict(item.split("=", 1) for item in self.options.get("elsewhere", "").split())
        here = str(self.env.doc2path(self.env.docname))
        for name in public_modules(self.arguments[0]):
            # a section per module: the heading, the docstring (Markdown), the members (autodoc)
            if name == self.arguments[0]:  # the package itself: the page's title is its heading
                level = 1
                render_markdown(self, f"(api-{name})=\n", here, self.lineno)
            else:  # a section per module (its subpackage's modules one level down); link: page.md#api-NAME
                level = 2 if name.count(".") == 1 else 3
                render_markdown(self, f"(api-{name})=\n{'#' * level} `{name}`\n", here, self.lineno)
            if name in elsewhere:
                render_markdown(self, f"Its docstring is the page [{elsewhere[name]}]({elsewhere[name]}).\n",
                                here, self.lineno)
            else:
                text, path, line = module_docstring(name)
                self.env.note_dependency(str(path))
                render_markdown(self, text, str(path), line, heading_level=level + 1)
            # autodoc writes reST: it must run inside eval-rst, or MyST would read its output as Markdown. A
            # package documents only what it defines itself: what it re-exports is documented where it is defined.
            options = "   :members:\n" + ("   :ignore-module-all:\n" if is_package(name) else "")
            render_markdown(self, f"```{{eval-rst}}\n.. automodule:: {name}\n{options}```\n", here, self.lineno)
        return []


def options_markdown() -> str:
    """What ``python docs/options_table.py`` prints."""
    spec = importlib.util.spec_from_file_location("options_table", DOCS / "options_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tables()


class OptionsTables(SphinxDirective):
    """``{optionstables}``: the config dataclasses' option tables (``docs/options_table.py``)."""

    def run(self) -> list[nodes.Node]:
        for path in (DOCS / "options_table.py", REPO / "trainers" / "config.py"):
            self.env.note_dependency(str(path))
        render_markdown(self, options_markdown(), str(self.env.doc2path(self.env.docname)), self.lineno,
                        heading_level=2)
        return []


def _drop_module_docstrings(app, what, name, obj, options, lines) -> None:
    if what == "module":
        lines.clear()  # rendered as Markdown by moduledoc / apipackage


def setup(app: Sphinx) -> dict:
    app.add_directive("moduledoc", ModuleDoc)
    app.add_directive("apipackage", APIPackage)
    app.add_directive("optionstables", OptionsTables)
    app.connect("autodoc-process-docstring", _drop_module_docstrings)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
