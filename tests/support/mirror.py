"""A miniature replica of every file the four recipes' paper profiles download, for the dress
rehearsal: same address (host and path under the mirror's root), same compression, same archive
layout and member names, same column layout, a few hundred real lines in the entry's languages
from ../shared/data. A file that ../shared/data holds itself (the WMT test sets and IWSLT20
references pinned by the recipes) is served as it is, so its pinned sha256 is checked for real;
every other file is a replica, listed with its sha256 in ``mirror.json``
(plugins/common/hub/mirror). A ``models:`` entry's hub files are a tiny random model of its family
(:func:`model_replicas`).

    python -m tests.support.mirror OUT_DIR        # writes the tree; serve it with any HTTP server
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from mtcore.contracts.registry import load_registry
from mtcore.recipe.load import load_recipe
from mtcore_plugins.sources.indexed import IndexedSource
from mtcore_plugins.sources.url import UrlSource
from tests.support import ROOT

DATA = ROOT.parent / "shared" / "data"
RECIPES = ("nt5", "yishu", "xiaomi", "hwtsc")
LINES = 300
LOCALES = Path("/usr/share/locale")
UNALIGNED = {frozenset({"et", "liv"}), frozenset({"liv", "lv"})}
"""Pairs no file here holds (liv4ever's Et-Liv and Liv-Lv, HW-TSC §5.3): their replicas pair
real text of each language (WMT22's Livonian, gettext's Estonian and Latvian) line by line,
not translations of each other; the rehearsal runs the graph, it scores nothing."""
MANIFEST = "mirror.json"


@dataclass
class Entry:
    """One url data entry of a paper profile, as its source is configured."""

    recipe: str
    name: str
    config: Any  # the url source's validated config
    langs: tuple[str, ...]


@dataclass
class Archive:
    """The members every entry reading one archive address asks for: path -> bytes."""

    members: dict[str, bytes] = field(default_factory=dict)


def url_entries(recipes: tuple[str, ...] = RECIPES, profile: str = "paper") -> list[Entry]:
    """Every entry that downloads: ``url`` entries as written, id-named ones (``mtdata``,
    ``sacrebleu``, ...) as their index resolves them, so the replicas have the members,
    columns and compression the index says, not what a recipe guessed."""
    registry = load_registry()
    found = []
    for name in recipes:
        recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml", registry, profile)
        for step_id, spec in recipe.steps.items():
            if spec.kind != "fetch":
                continue
            source = spec.plugin._source(registry)
            if isinstance(source, IndexedSource):
                source = source.url  # the url source the index's layout configures
            if not isinstance(source, UrlSource):
                continue
            found.append(Entry(name, step_id, source.config, tuple(source.langs())))
    return found


# --- real lines ----------------------------------------------------------------------------


def _read(path: Path) -> list[str]:
    return [line.replace("\t", " ") for line in path.read_text(encoding="utf-8").splitlines()]


def _wmt_pairs(a: str, b: str) -> list[tuple[str, str]] | None:
    for pair in (f"{a}-{b}", f"{b}-{a}"):
        x, y = pair.split("-")
        for repo, prefix in (
            ("wmt22", "generaltest2022"), ("wmt23", "generaltest2023"), ("wmt21", "newstest2021"),
        ):  # fmt: skip
            txt = DATA / pair / f"wmt-conference+{repo}-news-systems" / "txt"
            src = txt / "sources" / f"{prefix}.{pair}.src.{x}"
            ref = txt / "references" / f"{prefix}.{pair}.ref.A.{y}"
            if src.is_file() and ref.is_file():
                rows = list(zip(_read(src), _read(ref), strict=True))
                return rows if x == a else [(r, s) for s, r in rows]
    if {a, b} == {"zh", "ja"}:
        data = DATA / "zh-ja" / "didi+iwslt2020_open_domain_translation" / "eval" / "data"
        return list(zip(_read(data / f"ref.{a}"), _read(data / f"ref.{b}"), strict=True))
    return None


def _mono(lang: str) -> list[str]:
    """A WMT source in ``lang``, else a reference (WMT22 has no Croatian source text), else
    the translations of the system's gettext catalogs (Estonian, Latvian: no WMT set here)."""
    for pattern in (f"*.src.{lang}", f"*.ref.A.{lang}"):
        for path in sorted(DATA.glob(f"*/wmt-conference+*/txt/*/{pattern}")):
            return _read(path)
    found = _catalog_text(lang)
    if not found:
        raise LookupError(f"no {lang} text in {DATA} or {LOCALES}")
    return found


def _catalog_text(lang: str) -> list[str]:
    """The one-line, non-plural translations of ``lang``'s gettext catalogs, in file order."""
    from mtcore_plugins.sources.gettext import BadCatalog, parse_mo

    found: list[str] = []
    for path in sorted((LOCALES / lang / "LC_MESSAGES").glob("*.mo")):
        try:
            entries = parse_mo(path.read_bytes())
        except BadCatalog:
            continue
        for msgid, msgstr in entries:
            text = msgstr.decode("utf-8", "replace")
            if msgid and b"\x00" not in msgid and "\n" not in text and text.strip():
                found.append(text.replace("\t", " "))
    return found


def real_rows(langs: tuple[str, ...], name: str, lines: int = LINES) -> list[tuple[str, ...]]:
    """``lines`` real rows in ``langs`` (one or two), non-empty, from a place that depends on
    ``name`` so that two entries do not repeat each other."""
    if len(langs) == 1:
        rows: list[tuple[str, ...]] = [(line,) for line in _mono(langs[0])]
    elif frozenset(langs) in UNALIGNED:
        rows = list(zip(_mono(langs[0]), _mono(langs[1]), strict=False))
    else:
        pairs = _wmt_pairs(langs[0], langs[1])
        if pairs is None:
            raise LookupError(f"no {langs[0]}-{langs[1]} pairs in {DATA}")
        rows = list(pairs)
    rows = [row for row in rows if all(side.strip() for side in row)]
    start = zlib.crc32(name.encode()) % max(1, len(rows) - lines)
    return rows[start : start + lines]


def shared_copy(url: str) -> Path | None:
    """The file of ../shared/data a raw.githubusercontent.com address names, if staged there."""
    parts = urlsplit(url)
    if parts.netloc != "raw.githubusercontent.com":
        return None
    owner, repo, _commit, *rest = parts.path.strip("/").split("/")
    for path in DATA.glob(f"*/{owner}+{repo}/{'/'.join(rest)}"):
        return path
    return None


# --- layouts -------------------------------------------------------------------------------


def compress(data: bytes, name: str) -> bytes:
    if name.endswith(".gz"):
        return gzip.compress(data, mtime=0)
    if name.endswith(".xz"):
        return lzma.compress(data)
    return data


def text_lines(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def sgm(lines: list[str], lang: str) -> bytes:
    segs = "".join(f'<seg id="{i}">{line}</seg>\n' for i, line in enumerate(lines, 1))
    body = (
        f'<srcset setid="replica" srclang="any">\n<doc docid="d1" genre="news" origlang="{lang}">\n'
    )
    return (body + segs + "</doc>\n</srcset>\n").encode("utf-8")


def ted_tags(lines: list[str]) -> bytes:
    head = (
        "<url>http://www.ted.com/talks/replica</url>\n<talkid>1</talkid>\n<keywords>x</keywords>\n"
    )
    return (head + "".join(f"{line}\n" for line in lines)).encode("utf-8")


def tsv(rows: list[tuple[str, ...]], columns: dict[str, int], langs: tuple[str, ...]) -> bytes:
    """Rows laid out in the entry's columns; the others hold what such files hold there (a
    score, a domain): WikiMatrix's margin score, JParaCrawl's domains and Bicleaner score."""
    width = max(columns.values()) + 1
    out = []
    for i, row in enumerate(rows):
        fields = [
            f"{0.9 - i / 10_000:.4f}" if c == 0 else f"site{i % 7}.example" for c in range(width)
        ]
        for lang, column in columns.items():
            fields[column] = row[langs.index(lang)]
        out.append("\t".join(fields))
    return text_lines(out)


def wmt_xml(rows: list[tuple[str, ...]], langs: tuple[str, ...], translator: str | None) -> bytes:
    """A WMT21+ XML test set (``<src>`` and one ``<ref>`` per document) of ``rows``."""
    root = ET.Element("dataset", id="replica")
    collection = ET.SubElement(root, "collection", id="general")
    doc = ET.SubElement(collection, "doc", id="replica.1", origlang=langs[0])
    ref_attrs = {"lang": langs[1], **({"translator": translator} if translator else {})}
    for i, (tag, attrs) in enumerate((("src", {"lang": langs[0]}), ("ref", ref_attrs))):
        paragraph = ET.SubElement(ET.SubElement(doc, tag, **attrs), "p")
        for number, row in enumerate(rows, start=1):
            ET.SubElement(paragraph, "seg", id=str(number)).text = row[i]
    ET.indent(root)
    buffer = io.BytesIO()
    ET.ElementTree(root).write(buffer, encoding="utf-8", xml_declaration=True)
    return buffer.getvalue()


def concrete(pattern: str, stem: str) -> str:
    """A member path that the recipe's glob matches."""
    return pattern.replace("**", stem).replace("*", stem).replace("?", "x")


def member_bytes(path: str, lines: list[str], lang: str) -> bytes:
    name = Path(path).name
    if name.endswith(".sgm"):
        return sgm(lines, lang)
    if name.startswith("train.tags."):
        return ted_tags(lines)
    return text_lines(lines)


def archive_bytes(name: str, members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    if name.endswith(".zip"):
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path, data in sorted(members.items()):
                zipped.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), data)
        return buffer.getvalue()
    mode = "w:gz" if name.endswith((".tgz", ".tar.gz")) else "w:xz" if name.endswith(".xz") else "w"
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]
        for path, data in sorted(members.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --- the tree ------------------------------------------------------------------------------


FAMILIES = {"m2m100": "m2m100", "nllb": "nllb", "opus-mt": "marian", "mbart": "mbart50"}
"""A hub id's family (a part of its name) -> tests/support/tiny_pretrained.py's family."""


def model_replicas(
    out: Path, recipes: tuple[str, ...] = RECIPES, profile: str = "paper"
) -> dict[str, tuple[bytes, str]]:
    """Every file a ``models:`` entry of a paper profile fetches from the hub: a tiny random
    model of the entry's family (tests/support/tiny_pretrained.py; SentencePiece on real English,
    1024 positions as M2M-100's), at the address ``fetch_model`` asks, ``pytorch_model.bin``
    for an entry with ``weights: bin``. Returns address -> (bytes, the entry's name)."""
    import torch
    from safetensors.torch import load_file

    from tests.support.tiny_pretrained import build

    registry = load_registry()
    found: dict[str, tuple[bytes, str]] = {}
    for name in recipes:
        recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml", registry, profile)
        for step_id, spec in recipe.steps.items():
            cfg = spec.plugin.config
            if not type(spec.plugin).fetches_model or not cfg.id.startswith("hf:"):
                continue
            repo = cfg.id.removeprefix("hf:")
            if cfg.metric is not None:
                found.update(metric_replicas(out / f"{name}.{step_id}", cfg, step_id))
                continue
            family = next(f for key, f in FAMILIES.items() if key in repo.lower())
            text = [row[0] for row in real_rows(("en",), f"{name}.{step_id}", 400)]
            model = build(family, text, out / f"{name}.{step_id}", max_position_embeddings=1024)
            if cfg.weights == "bin":
                torch.save(load_file(str(model / "model.safetensors")), model / "pytorch_model.bin")
            for path in sorted(model.iterdir()):
                if path.is_file():
                    address = f"https://huggingface.co/{repo}/resolve/{cfg.revision}/{path.name}"
                    found[address] = (path.read_bytes(), step_id)
    return found


def metric_replicas(out: Path, cfg: Any, step_id: str) -> dict[str, tuple[bytes, str]]:
    """A metric model entry's files (``metric: comet`` or ``metricx``): a tiny random model of its
    kind (tests/support/tiny_comet.py: CometKiwi when the id says kiwi, xCOMET when it says xcomet;
    tests/support/tiny_metricx.py), at the entry's address, and its encoder's tokenizer files at the
    ``encoder`` repository's."""
    from tests.support.tiny_comet import build_encoder, comet_model, save_model
    from tests.support.tiny_metricx import build as build_metricx

    repo = cfg.id.removeprefix("hf:")
    hub = "https://huggingface.co"
    files: dict[str, Path] = {}
    if cfg.metric == "comet":
        kind = next((k for k in ("kiwi", "xcomet") if k in repo.lower()), "comet")
        encoder = build_encoder(out / "encoder")
        model = save_model(
            comet_model({"kiwi": "cometkiwi"}.get(kind, kind), encoder), out / "model"
        )
        hparams = yaml.safe_load((model / "hparams.yaml").read_text())
        hparams["pretrained_model"] = (cfg.encoder or "").removeprefix("hf:")
        (model / "hparams.yaml").write_text(yaml.safe_dump(hparams))
        files = {"hparams.yaml": model / "hparams.yaml",
                 "checkpoints/model.ckpt": model / "checkpoints" / "model.ckpt"}  # fmt: skip
        tokenizer = {n: encoder / n for n in ("config.json", "sentencepiece.bpe.model")}
    else:
        model = build_metricx(out / "model", described=False)
        files = {n: model / n for n in ("config.json", "model.safetensors")}
        tokenizer = {"spiece.model": model / "tokenizer" / "spiece.model"}
    found = {
        f"{hub}/{repo}/resolve/{cfg.revision}/{name}": (path.read_bytes(), step_id)
        for name, path in files.items()
    }
    encoder_repo = (cfg.encoder or "").removeprefix("hf:")
    for name, path in tokenizer.items():
        address = f"{hub}/{encoder_repo}/resolve/{cfg.encoder_revision}/{name}"
        found[address] = (path.read_bytes(), step_id)
    return found


def mirror_path(out: Path, url: str) -> Path:
    parts = urlsplit(url)
    return out / parts.netloc / parts.path.lstrip("/")


def build_mirror(
    out: Path, recipes: tuple[str, ...] = RECIPES, lines: int = LINES
) -> dict[str, Any]:
    """Writes the replica tree under ``out`` and its ``mirror.json``; returns, per address,
    what it is (``replica`` or ``real``) and which entries read it."""
    files: dict[str, bytes] = {}
    real: dict[str, Path] = {}
    archives: dict[str, Archive] = defaultdict(Archive)
    readers: dict[str, list[str]] = defaultdict(list)
    for entry in url_entries(recipes):
        cfg, langs = entry.config, entry.langs
        rows = real_rows(langs, f"{entry.recipe}.{entry.name}", lines)
        columns = {lang: [row[i] for row in rows] for i, lang in enumerate(langs)}
        if cfg.files:
            for lang, spec in cfg.files.items():
                readers[spec.url].append(entry.name)
                found = shared_copy(spec.url)
                if found is not None:
                    real[spec.url] = found
                    continue
                name = urlsplit(spec.url).path
                data = member_bytes(
                    name.removesuffix(".gz").removesuffix(".xz"), columns[lang], lang
                )
                files[spec.url] = compress(data, name)
        elif cfg.tsv is not None:
            readers[cfg.tsv.url].append(entry.name)
            files[cfg.tsv.url] = compress(
                tsv(rows, dict(cfg.columns), langs), urlsplit(cfg.tsv.url).path
            )
        elif cfg.archive is not None:
            url = cfg.archive.url
            readers[url].append(entry.name)
            stem = Path(urlsplit(url).path).name.split(".")[0] or "replica"
            members = archives[url].members
            if isinstance(cfg.member, str) and cfg.columns is None:
                members[concrete(cfg.member, stem)] = wmt_xml(rows, langs, cfg.translator)
            elif isinstance(cfg.member, str):
                members[concrete(cfg.member, stem)] = tsv(rows, dict(cfg.columns), langs)
            else:
                for lang, pattern in cfg.member.items():
                    path = concrete(pattern, stem)
                    members[path] = member_bytes(path, columns[lang], lang)
        else:
            raise NotImplementedError(f"{entry.recipe}.{entry.name}: no replica for this layout")
    for url, archive in archives.items():
        files[url] = archive_bytes(urlsplit(url).path, archive.members)
    for url, (data, entry) in model_replicas(out.parent / f".{out.name}.models", recipes).items():
        files[url] = data
        readers[url].append(entry)
    replicas = {}
    for url, data in files.items():
        target = mirror_path(out, url)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        replicas[url] = hashlib.sha256(data).hexdigest()
    for url, path in real.items():
        target = mirror_path(out, url)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    (out / MANIFEST).write_text(json.dumps({"replicas": replicas}, indent=1, sort_keys=True) + "\n")
    kinds = {**{u: "replica" for u in files}, **{u: "real" for u in real}}
    return {url: {"kind": kinds[url], "entries": readers[url]} for url in sorted(kinds)}


if __name__ == "__main__":
    built = build_mirror(Path(sys.argv[1]))
    for address, info in built.items():
        print(f"{info['kind']:8} {address}  <- {', '.join(info['entries'])}")
