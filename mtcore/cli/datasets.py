"""``mtcore datasets L1-L2``: what the installed indexes (mtdata's, sacrebleu's) hold for a
pair or a language, as a table or as data entries to paste into a recipe."""

from __future__ import annotations

import re

import click
import yaml

from mtcore.contracts.errors import MtcoreError
from mtcore.contracts.kinds import CatalogEntry
from mtcore.contracts.registry import load_registry

_CODE = re.compile(r"^[A-Za-z]{2,3}(_[A-Za-z0-9]+)?$")


def entry_name(item: CatalogEntry) -> str:
    """A data entry name (lower_snake_case) for ``item``: its id without the group."""
    parts = item.id.replace(":", "-").split("-")
    first = 1 if item.source == "mtdata" and len(parts) > 3 else 0  # mtdata's group
    core = parts[first : len(parts) - len(item.langs)]  # the languages follow, as mtcore codes
    name = re.sub(r"[^a-z0-9]+", "_", "_".join([*core, *item.langs]).lower()).strip("_")
    return name if name[:1].isalpha() else f"d_{name}"


@click.command()
@click.argument("pair")
@click.option("--grep", "-g", default=None, help="Only ids (or addresses) containing WORD.")
@click.option(
    "--source", "-s", "sources", multiple=True, help="Only these sources (mtdata, sacrebleu)."
)
@click.option("--recipe", "as_recipe", is_flag=True, help="Print data entries to paste.")
def datasets(pair: str, grep: str | None, sources: tuple[str, ...], as_recipe: bool) -> None:
    """List the corpora and test sets the installed indexes hold for PAIR (en-ja; a single
    language for monolingual corpora), by the id a recipe's data entry names them with."""
    langs = tuple(pair.split("-"))
    if not 1 <= len(langs) <= 2 or not all(_CODE.match(code) for code in langs):
        raise MtcoreError(f"{pair!r}: give a pair as L1-L2 (en-ja) or one language (ja)")
    registry = load_registry()
    names = sources or tuple(registry.names("sources"))
    found: list[CatalogEntry] = []
    for name in names:
        found.extend(registry.load("sources", name).catalogue(langs, grep))
    if not found:
        click.echo(f"no indexed corpus for {pair}" + (f" containing {grep!r}" if grep else ""))
        return
    if as_recipe:
        entries: dict[str, object] = {}
        for item in found:
            key, n = entry_name(item), 2
            while key in entries:
                key, n = f"{entry_name(item)}_{n}", n + 1
            entries[key] = item.entry
        text = yaml.safe_dump(
            {"data": entries},
            sort_keys=False,
            allow_unicode=True,
            width=200,
            default_flow_style=None,
        )
        click.echo(text.rstrip())
        return
    width = max(len(item.id) for item in found)
    click.echo(f"{'source':10} {'id':{width}}  {'size':13} address")
    for item in found:
        click.echo(f"{item.source:10} {item.id:{width}}  {item.size or '-':13} {item.address}")
    click.echo(f"{len(found)} corpora; --recipe prints them as data entries")
