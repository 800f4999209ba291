#!/usr/bin/env python3
"""Checks the links of the built book and of markdown files, offline.

    scripts/check-links.py BOOK_DIR [FILE.md ...]

BOOK_DIR is mdBook's output (target/book). In every .html page under it, each relative link
(`href`, `src`) must name a file or directory that exists, and a `#fragment` must be an `id`
(or an `<a name>`) of the page it points to. In each markdown file given (README.md), each
relative link and image must name a file or directory that exists, relative to that file, and
a `#fragment` into a markdown file must be one of its headings as GitHub names them.

Links with a scheme (https:, mailto: …) are not fetched: CI has no network. Prints one line
per broken link, naming the page and the link, and exits 1 if there is any.
"""

import html.parser
import os
import re
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    """An HTML page's ids, links and `<base href>`."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []
        self.base = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "base" and attrs.get("href"):
            self.base = attrs["href"]
        for key in ("href", "src"):
            if attrs.get(key) is not None and tag != "base":
                self.links.append(attrs[key])


def external(link):
    """A link with a scheme (https:, mailto:, data:, javascript: …), or protocol-relative."""
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", link)) or link.startswith("//")


def check_book(root):
    root = os.path.abspath(root)
    pages = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                page = Page()
                with open(path, encoding="utf-8") as f:
                    page.feed(f.read())
                pages[path] = page
    if not pages:
        return [f"{root}: no HTML pages (was the book built?)"]
    broken = []
    for path, page in sorted(pages.items()):
        where = os.path.relpath(path, root)
        # mdBook's 404 page carries <base href="/">: its links start at the book's root.
        base = os.path.dirname(path)
        if page.base is not None and not external(page.base):
            base = os.path.join(root, page.base.lstrip("/")) if page.base.startswith("/") \
                else os.path.join(base, page.base)
        for link in page.links:
            if not link or external(link):
                continue
            target, _, fragment = link.partition("#")
            target = urllib.parse.unquote(target.split("?")[0])
            if not target:
                file = path
            elif target.startswith("/"):
                file = os.path.join(root, target.lstrip("/"))
            else:
                file = os.path.normpath(os.path.join(base, target))
            if not file.startswith(root + os.sep) and file != root:
                broken.append(f"{where}: {link}: leads outside the book")
                continue
            if not os.path.exists(file):
                broken.append(f"{where}: {link}: no such file")
                continue
            if fragment:
                if os.path.isdir(file):
                    file = os.path.join(file, "index.html")
                target_page = pages.get(file)
                if target_page is None:
                    broken.append(f"{where}: {link}: #{fragment} points into a page that is not HTML")
                elif urllib.parse.unquote(fragment) not in target_page.ids:
                    broken.append(f"{where}: {link}: no id {fragment!r} in {os.path.relpath(file, root)}")
    return broken


FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target "title") and ![alt](target), once code spans are out of the way.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def markdown_lines(path):
    """(number, line, line with inline code spans blanked) for each line outside fenced code."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line, re.sub(r"`[^`]*`", "``", line)


def github_slugs(path):
    """The anchors GitHub gives a markdown file's headings."""
    slugs, seen = set(), {}
    for _, line, _ in markdown_lines(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        # The heading's text as GitHub renders it: a link keeps its text, markup goes.
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


def check_markdown(path):
    broken = []
    folder = os.path.dirname(os.path.abspath(path))
    for number, _, line in markdown_lines(path):
        targets = INLINE.findall(line)
        m = REFERENCE.match(line)
        if m:
            targets.append(m.group(1))
        for link in targets:
            if not link or external(link):
                continue
            target, _, fragment = link.partition("#")
            file = os.path.normpath(os.path.join(folder, urllib.parse.unquote(target))) if target \
                else os.path.abspath(path)
            if not os.path.exists(file):
                broken.append(f"{path}:{number}: {link}: no such file")
            elif fragment and file.endswith(".md") and fragment not in github_slugs(file):
                broken.append(f"{path}:{number}: {link}: no heading #{fragment} in {os.path.relpath(file)}")
    return broken


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    broken = check_book(argv[1])
    for path in argv[2:]:
        broken += check_markdown(path)
    for line in broken:
        print(f"broken link: {line}")
    if broken:
        print(f"check-links: {len(broken)} broken link(s)")
        return 1
    print(f"check-links: every relative link and anchor resolves ({argv[1]}, {', '.join(argv[2:]) or 'no markdown'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
