"""Language codes in one place: ISO 639-1, ISO 639-2/3 (terminological and bibliographic),
macrolanguages and their individual languages, BCP 47 / NLLB-style region and script subtags.

Recipes spell a language as the corpora they come from do (``ja``, ``jpn``, ``zh-CN``,
``zho_Hans``, ``cmn``); each tool labels languages its own way (langid.py and lid.176 with ISO
639-1, heliport with ISO 639-3 and macrolanguages such as ``hbs`` for Croatian, NLLB's lid218e
and OpenLID with ``eng_Latn``). :func:`names` lists what one code may be called, most specific
first; :func:`resolve` picks the name a tool knows; :func:`iso1` is the two-letter code where
one exists (segmenters, script tables).

The ISO 639-1 and bibliographic tables are ISO 639-3's (as pycountry 26.2.16 ships them: 184
two-letter codes, 20 bibliographic ones); the macrolanguage table holds the macrolanguages the
LID models below label by one of their members, or by the macrolanguage, with the member most
text is written in first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

_ISO1 = (
    "aa:aar ab:abk ae:ave af:afr ak:aka am:amh an:arg ar:ara as:asm av:ava ay:aym az:aze ba:bak "
    "be:bel bg:bul bi:bis bm:bam bn:ben bo:bod br:bre bs:bos ca:cat ce:che ch:cha co:cos cr:cre "
    "cs:ces cu:chu cv:chv cy:cym da:dan de:deu dv:div dz:dzo ee:ewe el:ell en:eng eo:epo es:spa "
    "et:est eu:eus fa:fas ff:ful fi:fin fj:fij fo:fao fr:fra fy:fry ga:gle gd:gla gl:glg gn:grn "
    "gu:guj gv:glv ha:hau he:heb hi:hin ho:hmo hr:hrv ht:hat hu:hun hy:hye hz:her ia:ina id:ind "
    "ie:ile ig:ibo ii:iii ik:ipk io:ido is:isl it:ita iu:iku ja:jpn jv:jav ka:kat kg:kon ki:kik "
    "kj:kua kk:kaz kl:kal km:khm kn:kan ko:kor kr:kau ks:kas ku:kur kv:kom kw:cor ky:kir la:lat "
    "lb:ltz lg:lug li:lim ln:lin lo:lao lt:lit lu:lub lv:lav mg:mlg mh:mah mi:mri mk:mkd ml:mal "
    "mn:mon mr:mar ms:msa mt:mlt my:mya na:nau nb:nob nd:nde ne:nep ng:ndo nl:nld nn:nno no:nor "
    "nr:nbl nv:nav ny:nya oc:oci oj:oji om:orm or:ori os:oss pa:pan pi:pli pl:pol ps:pus pt:por "
    "qu:que rm:roh rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd se:sme sg:sag sh:hbs si:sin "
    "sk:slk sl:slv sm:smo sn:sna so:som sq:sqi sr:srp ss:ssw st:sot su:sun sv:swe sw:swa ta:tam "
    "te:tel tg:tgk th:tha ti:tir tk:tuk tl:tgl tn:tsn to:ton tr:tur ts:tso tt:tat tw:twi ty:tah "
    "ug:uig uk:ukr ur:urd uz:uzb ve:ven vi:vie vo:vol wa:wln wo:wol xh:xho yi:yid yo:yor za:zha "
    "zh:zho zu:zul"
)
_BIBLIOGRAPHIC = (
    "alb:sqi arm:hye baq:eus bur:mya chi:zho cze:ces dut:nld fre:fra geo:kat ger:deu gre:ell "
    "ice:isl mac:mkd mao:mri may:msa per:fas rum:ron slo:slk tib:bod wel:cym"
)
_MACRO = (
    "zho:cmn,yue,wuu,lzh fas:pes,prs msa:zsm,ind,min uzb:uzn pus:pbt,pst orm:gaz aym:ayr "
    "kur:kmr ara:arb nor:nob,nno hbs:hrv,srp,bos est:ekk,vro lav:lvs,ltg nep:npi ori:ory "
    "mon:khk yid:ydd grn:gug que:quy swa:swh"
)

ISO1_TO_ISO3: dict[str, str] = dict(pair.split(":") for pair in _ISO1.split())  # type: ignore[misc]
ISO3_TO_ISO1: dict[str, str] = {three: one for one, three in ISO1_TO_ISO3.items()}
BIBLIOGRAPHIC: dict[str, str] = dict(pair.split(":") for pair in _BIBLIOGRAPHIC.split())  # type: ignore[misc]
MEMBERS: dict[str, tuple[str, ...]] = {
    macro: tuple(members.split(","))
    for macro, members in (entry.split(":") for entry in _MACRO.split())
}
MACRO_OF: dict[str, str] = {m: macro for macro, members in MEMBERS.items() for m in members}


def primary(code: str) -> str:
    """The language subtag, lower-cased: ``zh-CN``, ``zho_Hans``, ``__label__eng_Latn`` ->
    ``zh``, ``zho``, ``eng``."""
    tag = code.strip().lower().removeprefix("__label__").replace("_", "-")
    return tag.split("-")[0]


def iso3(code: str) -> str:
    """The ISO 639-3 code: ``ja``, ``jpn``, ``ger`` -> ``jpn``, ``jpn``, ``deu``."""
    base = primary(code)
    return ISO1_TO_ISO3.get(base) or BIBLIOGRAPHIC.get(base) or base


def iso1(code: str) -> str:
    """The ISO 639-1 code where the language (or its macrolanguage) has one, else its own
    primary subtag: ``cmn``, ``zho_Hans``, ``yue``, ``hrv`` -> ``zh``, ``zh``, ``zh``, ``hr``."""
    three = iso3(code)
    return ISO3_TO_ISO1.get(three) or ISO3_TO_ISO1.get(MACRO_OF.get(three, ""), primary(code))


def names(code: str) -> list[str]:
    """Every name the language of ``code`` may go by in a model's labels, the most specific
    first: the code itself, its ISO 639-3 and 639-1 codes, then its macrolanguage (``hrv`` ->
    ``hbs``, ``cmn`` -> ``zho``); for a macrolanguage, then its main member (``zh`` ->
    ``cmn``, ``no`` -> ``nob``), never a sibling (Cantonese is not Mandarin)."""
    base = primary(code)
    three = iso3(base)
    out = [base, three, ISO3_TO_ISO1.get(three, "")]
    macro = MACRO_OF.get(three)
    if macro:
        out += [macro, ISO3_TO_ISO1.get(macro, "")]
    if three in MEMBERS:
        out.append(MEMBERS[three][0])
    seen: list[str] = []
    for name in out:
        if name and name not in seen:
            seen.append(name)
    return seen


def resolve(code: str, labels: Collection[str], aliases: Mapping[str, str] | None = None) -> str:
    """The label among ``labels`` (a model's, normalized with :func:`primary`) that names the
    language of ``code``; ``aliases`` (code -> label) first. The empty string when none does."""
    table = {k.strip().lower().replace("_", "-"): v for k, v in (aliases or {}).items()}
    tag = code.strip().lower().replace("_", "-")
    for key in (tag, tag.split("-")[0]):
        if key in table:
            code = table[key]
            break
    for name in names(code):
        if name in labels:
            return name
    return ""
