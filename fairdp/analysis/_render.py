"""A report's document rendered as Markdown or as self-contained HTML.

``write_report`` (``_report``) computes what a report says, format-free: a ``Document`` of
sections, each a title, a caption and items (a figure, the main table, a subtable, a display
table). A ``Renderer`` says how each kind of item looks in one format; ``render`` walks the
document once for either.
"""

from __future__ import annotations

import dataclasses
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fairdp.analysis._tables import format_table, html_table, markdown_table

Item = tuple[str, object]  # (kind, payload): "figure" name, "table" frame, "subtable" (title, frame), "display"
#                           frame, "links" [(text, target without its extension)]


@dataclass
class Document:
    stamp: str
    partial: str | None
    sections: list[tuple[str, str, list[Item]]]
    figures: dict[str, Path | None]       # name -> the PNG drawn, None where it could not be
    captions: dict[str, str]              # figure name -> its caption
    fairness: str
    by: tuple[str, ...] = ()
    main: pd.DataFrame | None = None      # the table the marks belong to
    marks: dict | None = field(default=None)
    title: str = "fairdp report"
    base: str = ""                        # the path from the page to the report's folder ("../" for a page)


HALVES_AFTER = 40
"""An HTML display table longer than this (and at most ``HALVES_MAX_COLUMNS`` wide) is laid out
in two halves side by side: a long narrow table reads in half the height."""
HALVES_MAX_COLUMNS = 8


class Renderer:
    format: str

    def render(self, doc: Document) -> str:
        parts = self.head(doc)
        for title, text, items in doc.sections:
            parts.append(self.section(title, text))
            for kind, item in items:
                if kind == "figure":
                    if doc.figures.get(item) is not None:
                        parts.append(self.figure(item, doc.figures[item], doc.captions[item]))
                elif kind == "table":
                    main = item is doc.main
                    parts.append(format_table(item, self.format, doc.fairness, by=doc.by,
                                              marks=doc.marks if main else None))
                elif kind == "subtable":
                    parts.append(self.subtable(*item))
                elif kind == "links":
                    parts.append(self.links(item))
                else:
                    parts.append(self.display(item))
        return self.wrap(parts)


_HTML_START = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)")
# what makes a bracket a link: "](" (inline link or image), "]:" (a reference's definition),
# "][" (a reference link)
_LINK = re.compile(r"\](?=[(:\[])")


def _md(text) -> str:
    """Text from the rows (a method's, a dataset's name, a module's keyword) made inert in
    Markdown: viewers render raw HTML, so ``<script>`` in a method name would run there as it
    would in report.html without escaping, and they fetch images, so ``![p](http://...)`` in a
    keyword would load a remote image. Only what could open a tag or an entity is escaped
    (CommonMark's raw HTML starts with ``<`` and a letter, ``/``, ``!`` or ``?``), so the
    tables' ``<`` and ``>`` marks stay as they are, and the ``]`` that closes a link's text is
    escaped where a URL or reference follows it, so intervals such as [83.6, 84.3] stay as they
    are; the escapes show as the characters they stand for."""
    text = _HTML_START.sub(lambda m: "&lt;" if m.group(0) == "<" else "&amp;", str(text))
    return _LINK.sub(r"\\]", text)


def _md_frame(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its text cells and column names escaped by ``_md`` (numbers unchanged,
    the index kept for the marks that refer to rows)."""
    out = table.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(lambda v: _md(v) if isinstance(v, str) else v)
    return out.rename(columns=lambda c: _md(c) if isinstance(c, str) else c)


class MarkdownRenderer(Renderer):
    format = "md"

    def render(self, doc: Document) -> str:
        main = _md_frame(doc.main) if doc.main is not None else None
        sections = [(_md(title), _md(text),
                     [(kind, main if item is doc.main else _md_frame(item)) if kind in ("table", "display")
                      else (kind, (_md(item[0]), _md_frame(item[1]))) if kind == "subtable"
                      else (kind, [(_md(text), target) for text, target in item]) if kind == "links"
                      else (kind, item)
                      for kind, item in items])
                    for title, text, items in doc.sections]
        safe = dataclasses.replace(doc, partial=_md(doc.partial) if doc.partial else doc.partial, sections=sections,
                                   main=main,
                                   captions={k: _md(v) for k, v in doc.captions.items()}, title=_md(doc.title))
        self.base = doc.base
        return super().render(safe)

    def head(self, doc):
        parts = [f"# {doc.title}\n\n_Generated {doc.stamp}._\n"]
        if doc.partial:
            parts.append(f"**Not the whole study.** {doc.partial}\n")
        return parts

    def section(self, title, text):
        return f"\n## {title}\n\n{text}\n"

    def figure(self, name, path, caption):
        return f"![{caption.replace('[', '(').replace(']', ')')}]({self.base}figures/{name}.png)\n"

    def links(self, links):
        return "\n".join(f"- [{text}]({target}.md)" for text, target in links) + "\n"

    def subtable(self, title, table):
        return f"**{title}**\n\n{markdown_table(table)}"

    def display(self, table):
        return markdown_table(table)

    def wrap(self, parts):
        return "\n".join(parts).rstrip() + "\n"


class HtmlRenderer(Renderer):
    """A page that links its figures (``figures/<name>.png`` beside it) and the report's
    other pages, rather than embedding them: a reader loads what they open."""

    format = "html"
    STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             # the first page fits three 1280 x 900 screens: its figure kept short, its links inline
             "body.first figure img{max-width:75%;max-height:640px}body.first ul.links{padding:0}"
             "body.first ul.links li{display:inline;margin-right:1.2em}body.first h2{margin:.8em 0 .3em}"
             "table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.3em .6em}"
             "td{overflow-wrap:anywhere}table.wide{font-size:.8em}table.wide td,table.wide th{padding:.2em .35em}"
             "td{text-align:right}td:first-child,td:nth-child(2){text-align:left}"
             "img{max-width:100%}figcaption{font-size:.9em;color:#555}"
             ".scroll{overflow-x:auto;max-width:100%}.halves{display:flex;gap:1em;align-items:flex-start}"
             ".halves table{font-size:.85em}.halves td,.halves th{white-space:nowrap;overflow-wrap:normal;padding:.2em .4em}")

    head_parts: list = []

    def render(self, doc: Document) -> str:
        self.base, self.title = doc.base, doc.title
        return super().render(doc)

    def head(self, doc):
        parts = [f"<h1>{html.escape(doc.title)}</h1>\n<p><em>Generated {html.escape(doc.stamp)}.</em></p>"]
        if doc.partial:
            parts.append(f"<p><strong>Not the whole study.</strong> {html.escape(doc.partial)}</p>")
        self.head_parts = list(parts)  # the table of contents goes after them
        return parts

    def section(self, title, text):
        return f"<h2>{html.escape(title)}</h2>\n<p>{html.escape(text)}</p>"

    def figure(self, name, path, caption):
        return (f'<figure><img alt="{html.escape(caption)}" src="{html.escape(self.base)}figures/{html.escape(name)}.png">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def links(self, links):
        return '<ul class="links">' + "".join(f'<li><a href="{html.escape(target)}.html">{html.escape(text)}</a></li>'
                                              for text, target in links) + "</ul>"

    def subtable(self, title, table):
        return f"<h3>{html.escape(title)}</h3>\n{html_table(table)}"

    def display(self, table):
        if len(table) > HALVES_AFTER and len(table.columns) <= HALVES_MAX_COLUMNS:  # a long, narrow table: two halves side by side
            half = (len(table) + 1) // 2
            return f'<div class="halves">{html_table(table.iloc[:half])}{html_table(table.iloc[half:])}</div>'
        return html_table(table)

    def wrap(self, parts):
        head, body = parts[:len(self.head_parts)], "\n".join(parts[len(self.head_parts):])
        body = _anchored(body)  # the first page's links are the contents: no list of them twice
        # a wide table (the selected configurations have 14 columns) scrolls inside the page
        body = re.sub(r'(<table class="results[^"]*">.*?</table>)', r'<div class="scroll">\1</div>', body, flags=re.S)
        return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>{html.escape(self.title)}</title>\n"
                f"<style>{self.STYLE}</style>\n</head>\n<body{' class=first' if not self.base else ''}>\n"
                + "\n".join([*head, body]) + "\n</body>\n</html>\n")


def _anchored(body: str) -> str:
    """``body`` with an id on every h2 and h3, so that a section can be linked to."""
    seen: dict[str, int] = {}

    def anchor(m: re.Match) -> str:
        level, title = int(m.group(1)), m.group(2)
        slug = re.sub(r"[^a-z0-9]+", "-", html.unescape(title).lower()).strip("-") or "section"
        seen[slug] = seen.get(slug, 0) + 1
        slug = slug if seen[slug] == 1 else f"{slug}-{seen[slug]}"
        return f'<h{level} id="{slug}">{title}</h{level}>'

    return re.sub(r"<h([23])>(.*?)</h\1>", anchor, body)
