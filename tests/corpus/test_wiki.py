"""MediaWiki dump reading and wikitext-to-text conversion (ralm.corpus.wiki)."""

from __future__ import annotations

import bz2
import gzip
import os
import random
import time
from pathlib import Path

import pytest

from ralm.corpus.types import Article, LinkSpan
from ralm.corpus.wiki import iter_wiki_dump
from ralm.corpus.wikitext import NORDIC_DROP_SECTIONS, normalize_title, wikitext_to_text
from ralm.errors import CorpusError

ENWIKI_NAME = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BGWIKI_NAME = "bgwiki-latest-pages-articles-shortened.xml.bz2"


def gensim_sample(name: str) -> Path:
    """A wiki dump sample shipped inside gensim (the `samples` extra); skip without gensim."""
    gensim = pytest.importorskip("gensim")
    return Path(os.path.dirname(gensim.__file__)) / "test" / "test_data" / name


def spans(text: str, links: list[LinkSpan]) -> list[tuple[str, str]]:
    """(anchor text, target) for every link, checking the span is sane on the way."""
    out = []
    for s in links:
        assert 0 <= s.start < s.end <= len(text), s
        anchor = text[s.start : s.end]
        assert anchor == anchor.strip() and anchor, s
        out.append((anchor, s.target))
    return out


# ----------------------------------------------------------------------------- normalize_title


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("anarchism", "Anarchism"),
        ("Free_software_movement", "Free software movement"),
        ("  a   b_ _c ", "A b c"),
        ("History of Rome#Early history", "History of Rome"),
        (":Category:Foo", "Category:Foo"),
        ("#Only a fragment", ""),
        ("ñandú", "Ñandú"),
        ("", ""),
    ],
)
def test_normalize_title(raw: str, expected: str) -> None:
    assert normalize_title(raw) == expected


# ----------------------------------------------------------------------------- wikitext_to_text


@pytest.mark.parametrize(
    ("wikitext", "text", "links"),
    [
        ("[[A|b]]", "b", [(0, 1, "A")]),
        ("[[A]]", "A", [(0, 1, "A")]),
        ("x [[a_b#Sec|shown]] y", "x shown y", [(2, 7, "A b")]),
        # link trail: lower-case letters glued to the link belong to the anchor
        (
            "[[Paris]]ian food, [[A|b]]s and [[A]]'s",
            "Parisian food, bs and A's",
            [(0, 8, "Paris"), (15, 17, "A"), (22, 23, "A")],
        ),
        ("[[A]]B [[c]]1", "AB c1", [(0, 1, "A"), (3, 4, "C")]),
        # templates, nested ones and ones containing links, vanish
        ("x {{a|{{b|c}}|d=[[L]]}} y", "x y", []),
        ("{{Infobox\n| name = X\n| image = [[File:x.png]]\n}}\nBody", "Body", []),
        # refs: self-closing, paired, with attributes, with links inside
        ('x<ref name=n/> y<ref>{{cite|t}} [[L]]</ref> z<ref name="q">t</ref>.', "x y z.", []),
        ("a\n{| class=wikitable\n|-\n| [[x]] || y\n|}\nb", "a\n\nb", []),
        ("[[File:X.jpg|thumb|cap [[L]]]] a [[Image:y.png]] [[Category:C]] [[category:D|sort]] b", "a b", []),
        ("a [[de:Foo]] [[zh-min-nan:Foo]] [[simple:Foo]] b", "a b", []),
        # a leading colon makes an inline link out of a category; sister-project links keep text
        (
            "[[:Category:C]] and [[wikt:go|went]] and [[Wikipedia:About|about]]",
            "Category:C and went and about",
            [],
        ),
        ("[[Star Wars: Episode IV]] won", "Star Wars: Episode IV won", [(0, 21, "Star Wars: Episode IV")]),
        ("[[#History|below]]", "below", []),
        ("'''Bold''' and ''it'' and '''''both''''' [[A|''b'']]", "Bold and it and both b", [(21, 22, "A")]),
        ("[http://x.org label here] and http://bare.com and [http://y] end", "label here and and end", []),
        (
            "Intro\n== Head [[x]] ==\nBody\n=== Sub ===\nmore",
            "Intro\n\nHead x\n\nBody\n\nSub\n\nmore",
            [(12, 13, "X")],
        ),
        (
            "* one\n* [[two]]\n# three\n: indented\n;term: def\n** deep",
            "one\ntwo\nthree\nindented\nterm def\ndeep",
            [(4, 7, "Two")],
        ),
        ("a&nbsp;b &amp; c&ndash;d &lt;e&gt; &#233;", "a b & c–d <e> é", []),
        ("&lt;small&gt; &amp;amp; [[A&amp;B|A&amp;B]]", "<small> &amp; A&B", [(14, 17, "A&B")]),
        ("stray </div> <center>tags</center> and <ref>unclosed", "stray\ntags\nand unclosed", []),
        ("a<!-- hidden [[L]] -->b <!--\nmulti\n-->c", "ab c", []),
        ("__NOTOC__\nText __TOC__ end", "Text end", []),
        ("x <small>s</small> <span style='a'>sp</span> H<sub>2</sub>O<br/>y", "x s sp H2O\ny", []),
        ("<gallery>\nA.jpg|cap\n</gallery>\n<math>x^2</math> <timeline>q</timeline> ok", "ok", []),
        ("p1\n\n\n\np2  with   spaces\t\tand tabs  \n  p3", "p1\n\np2 with spaces and tabs\np3", []),
        # links with nothing to show are dropped (and take no link trail)
        ("[[A|]] [[A| ]]x [[A|<!-- c -->]]y", "x y", []),
        ("", "", []),
    ],
)
def test_wikitext_to_text_exact(wikitext: str, text: str, links: list[tuple[int, int, str]]) -> None:
    got_text, got_links = wikitext_to_text(wikitext)
    assert got_text == text
    assert got_links == [LinkSpan(*link) for link in links]


def test_boilerplate_sections_dropped_by_default() -> None:
    wikitext = (
        "Text [[a]].\n== History ==\nOld.\n== See also ==\n* [[X]]\n=== Sub of see also ===\nz\n"
        "== References ==\n{{reflist}}\n== External links ==\n* [http://x.org site]\n[[Category:Y]]"
    )
    assert wikitext_to_text(wikitext) == ("Text a.\n\nHistory\n\nOld.", [LinkSpan(5, 6, "A")])
    text, _ = wikitext_to_text(wikitext, drop_sections=None)
    assert (
        text
        == "Text a.\n\nHistory\n\nOld.\n\nSee also\n\nX\n\nSub of see also\n\nz\n\nReferences\n\nExternal links\n\nsite"
    )
    # a dropped section ends at the next heading of the same or a higher level
    assert wikitext_to_text("== Notes ==\nn\n== Life ==\nl")[0] == "Life\n\nl"


def test_boilerplate_sections_other_languages() -> None:
    wikitext = "Tekst.\n== Se også ==\n* [[X]]\n== Referanser ==\n<references/>\n== Eksterne lenker ==\n* x"
    assert wikitext_to_text(wikitext, drop_sections=NORDIC_DROP_SECTIONS)[0] == "Tekst."
    assert wikitext_to_text(wikitext)[0].startswith("Tekst.\n\nSe også")


def test_localised_prefixes() -> None:
    wikitext = "Текст [[Файл:A.png|мини|Надпис]] [[Категория:Б]] [[Картинка:B.png]] [[Шаблон:X|т]] [[en:A]]"
    text, links = wikitext_to_text(
        wikitext,
        drop_prefixes={"Файл", "Категория", "Медия", "Картинка", "File", "Category"},
        namespace_prefixes={"Шаблон"},
    )
    assert (text, links) == ("Текст т", [])
    # without the localised names they look like ordinary article links
    text, links = wikitext_to_text("[[Файл:A.png|Надпис]]")
    assert spans(text, links) == [("Надпис", "Файл:A.png")]


def test_link_spans_match_anchors_randomised() -> None:
    """Mix links with every kind of markup and whitespace; each span must be its anchor."""
    rng = random.Random(1234)
    fillers = [
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\t",
        " x ",
        "{{t|[[Z]]}}",
        "<ref>[[R]] r</ref>",
        "<!-- c -->",
        "''",
        "'''",
        "&nbsp;",
        "&amp;",
        "\n* ",
        "\n: ",
        "\n== H ==\n",
        "[[File:f.png|thumb|[[F]]]]",
        "[[Category:K]]",
        "[http://u.org w]",
        "<small>s</small>",
        "word",
        ". ",
        "\n{|\n| c\n|}\n",
    ]
    for _ in range(300):
        pieces, expected = [], []
        for _ in range(rng.randint(1, 12)):
            pieces.append(rng.choice(fillers))
            target = rng.choice(["alpha", "Beta gamma", "delta_eps", "Zeta#Sec"])
            form = rng.randrange(4)
            if form == 0:
                pieces.append(f"[[{target}]]")
                anchor = target
            elif form == 1:
                anchor = rng.choice(["shown", "two  words", "ünïcode", "a&amp;b"])
                pieces.append(f"[[{target}|{anchor}]]")
                anchor = " ".join(anchor.replace("&amp;", "&").split())
            elif form == 2:
                pieces.append(f"[[{target}|''it'' {{{{x}}}}x]]")
                anchor = "it x"
            else:  # a removed template is as if it expanded to nothing: keep the trail apart
                pieces.append(f"[[{target}]]s")
                anchor = target + "s"
            pieces.append(rng.choice([" ", "\n", ", ", "\n\n", "<ref/>", "{{y}} "]))
            expected.append((anchor, normalize_title(target)))
        text, links = wikitext_to_text("".join(pieces), drop_sections=None)
        assert spans(text, links) == expected, "".join(pieces)
        assert text == text.strip()
        assert "  " not in text and "\n\n\n" not in text and "\t" not in text
        assert all(line == line.strip() for line in text.split("\n"))


# ----------------------------------------------------------------------------- dumps

DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="bg">
  <siteinfo>
    <sitename>Test</sitename>
    <namespaces>
      <namespace key="-2" case="first-letter">Медия</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Беседа</namespace>
      <namespace key="6" case="first-letter">Файл</namespace>
      <namespace key="10" case="first-letter">Шаблон</namespace>
      <namespace key="14" case="first-letter">Категория</namespace>
    </namespaces>
  </siteinfo>
  <page>
    <title>Alpha</title>
    <ns>0</ns>
    <id>1</id>
    <revision>
      <id>100</id>
      <text xml:space="preserve">'''Alpha''' is a [[greek_letter|letter]].&lt;ref&gt;src&lt;/ref&gt;
[[Файл:A.png|thumb|Caption]]
{{Infobox|x=1}}
See [[Beta]]s &amp; [[Шаблон:X|tmpl]].
[[Категория:Letters]]
[[en:Alpha]]</text>
    </revision>
  </page>
  <page>
    <title>Old alpha</title>
    <ns>0</ns>
    <id>2</id>
    <redirect title="Alpha" />
    <revision><id>101</id><text>#REDIRECT [[Alpha]]</text></revision>
  </page>
  <page>
    <title>Gamma_redirect</title>
    <ns>0</ns>
    <id>3</id>
    <revision><id>102</id><text>#пренасочване [[gamma ray#Intro]]</text></revision>
  </page>
  <page>
    <title>Беседа:Alpha</title>
    <ns>1</ns>
    <id>4</id>
    <revision><id>103</id><text>Talk about [[Alpha]].</text></revision>
  </page>
  <page>
    <title>Empty</title>
    <ns>0</ns>
    <id>5</id>
    <revision><id>104</id><text>{{stub}}
[[Категория:X]]</text></revision>
  </page>
  <page>
    <title>Beta</title>
    <ns>0</ns>
    <id>6</id>
    <revision><id>105</id><text>Beta follows [[alpha]].</text></revision>
  </page>
</mediawiki>
"""

EXPECTED = [
    Article(
        title="Alpha",
        text="Alpha is a letter.\n\nSee Betas & tmpl.",
        source_id="1",
        links=[LinkSpan(11, 17, "Greek letter"), LinkSpan(24, 29, "Beta")],
    ),
    Article(title="Beta", text="Beta follows alpha.", source_id="6", links=[LinkSpan(13, 18, "Alpha")]),
]
EXPECTED_REDIRECTS = {"Old alpha": "Alpha", "Gamma redirect": "Gamma ray"}


@pytest.fixture
def dump_xml(tmp_path: Path) -> Path:
    path = tmp_path / "dump.xml"
    path.write_text(DUMP, encoding="utf-8")
    return path


def test_small_dump(dump_xml: Path) -> None:
    redirects: dict[str, str] = {}
    assert list(iter_wiki_dump(dump_xml, redirects=redirects)) == EXPECTED
    assert redirects == EXPECTED_REDIRECTS
    # without a dict, redirects are still skipped
    assert [a.title for a in iter_wiki_dump(str(dump_xml))] == ["Alpha", "Beta"]


def test_small_dump_other_namespaces(dump_xml: Path) -> None:
    articles = list(iter_wiki_dump(dump_xml, namespaces=(0, 1)))
    assert [a.title for a in articles] == ["Alpha", "Беседа:Alpha", "Beta"]
    assert articles[1].text == "Talk about Alpha."


@pytest.mark.parametrize("name", ["dump.xml.bz2", "dump.bz2", "dump.xml.gz", "dump-no-extension"])
def test_small_dump_compressed(tmp_path: Path, name: str) -> None:
    data = DUMP.encode("utf-8")
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else bz2.compress(data))
    redirects: dict[str, str] = {}
    assert list(iter_wiki_dump(path, redirects=redirects)) == EXPECTED
    assert redirects == EXPECTED_REDIRECTS


@pytest.mark.parametrize("xmlns", ['xmlns="http://www.mediawiki.org/xml/export-0.10/"', ""])
def test_small_dump_any_export_namespace(tmp_path: Path, xmlns: str) -> None:
    path = tmp_path / "dump.xml"
    path.write_text(
        DUMP.replace('xmlns="http://www.mediawiki.org/xml/export-0.11/"', xmlns), encoding="utf-8"
    )
    assert list(iter_wiki_dump(path)) == EXPECTED


def _check_articles(articles: list[Article]) -> None:
    for article in articles:
        assert article.text and article.text == article.text.strip()
        for marker in ("{{", "}}", "[[", "]]", "<ref", "{|", "&nbsp;", "''", "__"):
            assert marker not in article.text, (article.title, marker)
        spans(article.text, article.links)
        assert all(s.target for s in article.links)


def test_gensim_enwiki_sample(capsys: pytest.CaptureFixture[str]) -> None:
    redirects: dict[str, str] = {}
    t0 = time.perf_counter()
    articles = list(iter_wiki_dump(gensim_sample(ENWIKI_NAME), redirects=redirects))
    seconds = time.perf_counter() - t0
    with capsys.disabled():
        chars = sum(len(a.text) for a in articles)
        print(
            f"\n[enwiki sample] {len(articles)} articles in {seconds:.2f} s: "
            f"{len(articles) / seconds:.0f} articles/s, {chars / seconds / 1e6:.2f} M chars/s of output"
        )
    assert len(articles) == 106
    assert len(redirects) == 99
    assert redirects["AccessibleComputing"] == "Computer accessibility"
    titles = [a.title for a in articles]
    assert titles[:3] == ["Anarchism", "Autism", "Albedo"]
    assert len(set(titles)) == len(titles)
    assert not set(titles) & set(redirects)
    anarchism = articles[0]
    assert anarchism.source_id == "12"
    assert anarchism.text.startswith(
        "Anarchism is a political philosophy that advocates self-governed societies"
    )
    assert spans(anarchism.text, anarchism.links)[:2] == [
        ("political philosophy", "Political philosophy"),
        ("self-governed", "Self-governance"),
    ]
    assert sum(len(a.links) for a in articles) > 20_000
    _check_articles(articles)


def test_gensim_bgwiki_sample() -> None:
    """UTF-16 encoded, Bulgarian namespace names."""
    articles = list(iter_wiki_dump(gensim_sample(BGWIKI_NAME)))
    assert [(a.title, a.source_id) for a in articles] == [("Григориански календар", "558")]
    text = articles[0].text
    assert text.startswith("Григорианският календар (понякога наричан и Грегориански календар")
    assert "Категория:" not in text and "Файл:" not in text
    _check_articles(articles)


# ----------------------------------------------------------------------------- bad input


def test_missing_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.xml.bz2"
    with pytest.raises(CorpusError, match="no such file") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="is a directory"):
        list(iter_wiki_dump(tmp_path))


def test_truncated_bz2(tmp_path: Path) -> None:
    data = gensim_sample(BGWIKI_NAME).read_bytes()
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match="compressed stream ended early: the file is truncated") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_corrupt_bz2(tmp_path: Path) -> None:
    data = bytearray(bz2.compress(DUMP.encode()))
    data[40:60] = b"\0" * 20
    path = tmp_path / "bad.xml.bz2"
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="download it again") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)


def test_truncated_xml(tmp_path: Path) -> None:
    path = tmp_path / "cut.xml"
    cut = DUMP[: DUMP.index("<title>Beta")]
    path.write_text(cut, encoding="utf-8")
    line = cut.count("\n") + 1
    with pytest.raises(CorpusError, match=f"ends early at line {line}: the file is truncated") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    "content",
    [b"just some words, not XML\n", b'{"title": "A", "text": "json"}\n', b"<html><body>x</body></html>"],
)
def test_not_xml(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "dump.xml"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match="not a MediaWiki XML dump") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.xml"
    path.write_bytes(DUMP.replace("Beta follows", "B\u00e9ta follows").encode("latin-1", errors="replace"))
    line = DUMP[: DUMP.index("Beta follows")].count("\n") + 1
    with pytest.raises(CorpusError, match=f"not valid UTF-8/XML at line {line}, column 34") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)


def test_no_articles(tmp_path: Path) -> None:
    start, end = DUMP.index("  <page>"), DUMP.index("</mediawiki>")
    talk = DUMP[DUMP.index("  <page>\n    <title>Беседа") :]
    talk = talk[: talk.index("</page>") + len("</page>\n")]
    path = tmp_path / "talk-only.xml"
    path.write_text(DUMP[:start] + talk + DUMP[end:], encoding="utf-8")
    with pytest.raises(CorpusError, match=r"no articles in namespace 0 \(1 pages read\)") as err:
        list(iter_wiki_dump(path))
    assert str(path) in str(err.value)
    assert [a.title for a in iter_wiki_dump(path, namespaces=(1,))] == ["Беседа:Alpha"]
