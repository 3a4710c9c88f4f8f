"""UI strings (gettext catalogs) turned into plain text for training: accelerator marks,
literal escapes and text markup removed, format placeholders kept.

- Accelerators: the Japanese/Chinese suffix ``ファイル(_F)`` / ``(&F)`` (full-width brackets
  too) is removed. A mnemonic marker, GTK's ``_`` or Qt's ``&``, is removed where it starts a
  word before an ASCII letter or digit (``_File``, ``Color _name``, ``&Open``) or sits inside
  a capitalised word before lower-case letters (``Be_fore``, ``E&xit``), and only when exactly
  one word of the string qualifies (a label has one mnemonic). Identifiers and prose stay:
  ``track_counts``, ``LC_ALL``, ``.debug_line``, ``pg_tblspc/``, ``R&D``, ``drag&drop``,
  ``ドラッグ&ドロップ``, ``&amp;``. ``&&`` (Qt's literal ampersand) becomes ``&``.
- Escapes: real tabs and line breaks, and literal ``\\n`` and ``\\t`` become a space; not an
  escaped backslash (``\\\\n``) nor a backslash command word (psql's ``\\timing``).
- Markup: Pango and common HTML tags are removed when they are markup: a closing tag whose
  opening tag is in the string (and that opening tag), a tag with attributes, a self-closing
  tag, ``<br>``/``<hr>``. A lone ``<p>`` or ``<FILE>`` in a usage line is a metavariable and
  stays, as does ``<%s>``.

Whitespace runs are then collapsed and the ends stripped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import Field

from mtcore.api import PluginConfig, Processor

_SUFFIX = re.compile(r"\s*[(（][_&][^\W_][)）]")  # noqa: RUF001
# A word holding the mark (not one glued to a placeholder: %Xbfd_openr), with a following /.
_MARKED = {mark: re.compile(rf"(?<![\w.%$\\])[\w.]*{mark}[\w.]*/?") for mark in "_&"}
_ENTITY_AFTER = re.compile(r"#?\w+;")
# A literal \n or \t, but not an escaped backslash (\\n) nor a command word (psql's \timing).
_ESCAPES = re.compile(r"(?<!\\)\\[nt](?![A-Za-z])|(?<=[^\s\\])\\[nt]|[\t\n\r\x0b\x0c\u2028\u2029]")
_TAGS = (
    "a|abbr|b|big|blockquote|br|code|div|em|font|h[1-6]|hr|i|img|kbd|li|markup|ol|p|pre|"
    "s|samp|small|span|strike|strong|sub|sup|tt|u|ul|var"
)
_TAG = re.compile(rf"<(/?)({_TAGS})(\s+[^<>]*?)?\s*(/?)>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def is_mnemonic_word(word: str, mark: str) -> bool:
    """Whether ``mark`` in ``word`` (a run of word characters and dots holding it, with a
    following ``/``) is a mnemonic: see the module docstring."""
    if word.count(mark) != 1 or word.endswith("/"):
        return False
    before, _, after = word.partition(mark)
    if not (after[:1].isascii() and after[:1].isalnum()):
        return False
    if not before:
        return True
    if not latin_word(before) or not latin_word(after):
        return False
    return before[0].isupper() and before[1:] == before[1:].lower() and after == after.lower()


def latin_word(text: str) -> bool:
    """Letters of the Latin blocks only (a mid-word mnemonic is never next to CJK)."""
    return text.isalpha() and all(ord(ch) < 0x250 for ch in text)


def strip_mnemonic(text: str, mark: str) -> str:
    """``text`` without its one mnemonic ``mark`` (unchanged when none or several qualify)."""
    found = []
    for m in _MARKED[mark].finditer(text):
        if mark == "&" and _ENTITY_AFTER.match(text, m.start() + m.group().index("&") + 1):
            continue
        if is_mnemonic_word(m.group(), mark):
            found.append(m.start() + m.group().index(mark))
    if len(found) != 1:
        return text
    return text[: found[0]] + text[found[0] + 1 :]


def strip_markup(text: str) -> str:
    """Remove the tags that are markup (see the module docstring)."""
    tags = list(_TAG.finditer(text))
    opened = {m.group(2).lower() for m in tags if not m.group(1)}
    closed = {m.group(2).lower() for m in tags if m.group(1)}

    def markup(m: re.Match[str]) -> str:
        name = m.group(2).lower()
        paired = name in (opened if m.group(1) else closed)
        return "" if paired or m.group(3) or m.group(4) or name in ("br", "hr") else m.group()

    return _TAG.sub(markup, text)


class UiStringsConfig(PluginConfig):
    accelerators: bool = Field(True, description="remove accelerator marks: _File, &File, (_F)")
    ampersand: bool = Field(
        True,
        description="Qt/Windows & mnemonics and && escapes (turn off for GNU catalogs, where "
        "&& is the shell's)",
    )
    escapes: bool = Field(True, description="literal \\n, \\t, \\r and real breaks to a space")
    markup: bool = Field(True, description="remove Pango/HTML text markup tags")


class UiStringsProcessor(Processor[UiStringsConfig]):
    """One plain-text line per UI string, in order."""

    name = "ui_strings"

    def clean(self, text: str) -> str:
        if self.config.escapes:
            text = _ESCAPES.sub(" ", text)
        if self.config.markup and "<" in text:
            text = strip_markup(text)
        if self.config.accelerators:
            text = _SUFFIX.sub("", text)
            if "_" in text:
                text = strip_mnemonic(text, "_")
            if self.config.ampersand and "&" in text:
                text = "&".join(strip_mnemonic(part, "&") for part in text.split("&&"))
        return _SPACES.sub(" ", text).strip()

    def process(self, batch: Sequence[str], lang: str) -> list[str]:
        return [self.clean(text) for text in batch]
