"""`ralm surealm datastore|train|evaluate|generate` end to end on the tiny model, and bad input (exit 2)."""

from __future__ import annotations

import json

import pytest

from ralm.cli import main
from testkit import train_tiny_surealm

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_whole_path(capsys, tmp_path, tiny_dir, dialogue_file):
    tiny = str(tiny_dir)
    ds = tmp_path / "ds"
    code, out, _ = _run(
        capsys,
        "surealm",
        "datastore",
        str(dialogue_file),
        "--out",
        str(ds),
        "--lm",
        tiny,
        "--encoder",
        tiny,
        "--k",
        "3",
        "--m",
        "3",
        "--valid-frac",
        "0.2",
        "--test-frac",
        "0.2",
        "--quiet",
    )
    assert code == 0 and f"data store: {ds}" in out
    common = [
        "--lm",
        tiny,
        "--k",
        "3",
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--device",
        "cpu",
        "--autocast",
        "off",
        "--quiet",
    ]
    assert _run(capsys, "surealm", "train", str(ds), "--out", str(tmp_path / "s"), *common)[0] == 0
    code, out, _ = _run(
        capsys, "surealm", "train", str(ds), "--out", str(tmp_path / "b"), "--no-retrieval", *common
    )
    assert code == 0 and "valid token ppl" in out
    code, out, _ = _run(
        capsys,
        "surealm",
        "evaluate",
        str(tmp_path / "s"),
        str(tmp_path / "b"),
        "--knnlm",
        str(tmp_path / "b"),
        "--knn-k",
        "4",
        "--device",
        "cpu",
        "--json-out",
        str(tmp_path / "e.json"),
    )
    assert code == 0
    rows = json.loads((tmp_path / "e.json").read_text())["rows"]
    assert [r["kind"].split(" ")[0] for r in rows] == ["surealm", "no", "kNN-LM"]
    assert len({r["tokens"] for r in rows}) == 1 and all(r["token_ppl"] > 1 for r in rows)
    code, out, _ = _run(
        capsys,
        "surealm",
        "generate",
        str(tmp_path / "s"),
        "i would like",
        "--max-new-tokens",
        "3",
        "--show-retrievals",
        "--device",
        "cpu",
    )
    assert code == 0 and out.startswith("i would like") and "query 'i':" in out and "suffix" in out


@pytest.fixture(scope="module")
def trained(tiny_store, tiny_dir, tmp_path_factory):
    return train_tiny_surealm(tiny_store, tmp_path_factory.mktemp("cli-run") / "m", tiny_dir)


def test_bad_input_exits_2_with_one_line(capsys, tmp_path, tiny_dir, trained, tiny_store):
    tiny = str(tiny_dir)
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"text": "hi there"}\n{"text": ""}\n')
    one = tmp_path / "one.txt"
    one.write_text("hi\nyes\n\nno\nok\n")
    cases = [
        (
            [
                "surealm",
                "datastore",
                str(empty),
                "--out",
                str(tmp_path / "x"),
                "--lm",
                tiny,
                "--encoder",
                tiny,
            ],
            'e.jsonl:2: empty "text"',
        ),
        (
            [
                "surealm",
                "datastore",
                str(one),
                "--out",
                str(tmp_path / "y"),
                "--lm",
                tiny,
                "--encoder",
                tiny,
                "--valid-frac",
                "0",
                "--test-frac",
                "0",
            ],
            "no training sentence has two or more tokens",
        ),
        (
            ["surealm", "train", str(tiny_store), "--out", str(tmp_path / "z"), "--lm", tiny, "--k", "9"],
            "K=9 but .* kept only 3 neighbours",
        ),
        (["surealm", "generate", str(trained), "  "], "the prompt is empty"),
        (["surealm", "generate", str(tmp_path), "hello"], "not a SUREALM model"),
        (["surealm", "datastore", "--out", str(tmp_path / "w")], "give sentence files"),
    ]
    import re

    for argv, message in cases:
        code, _, err = _run(capsys, *argv)
        assert code == 2, argv
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ralm: error:") and re.search(message, lines[0]), err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_store_built_with_another_encoder_is_refused(capsys, tmp_path, tiny_dir, trained, dialogue_file):
    """Same sentences and LM, but the encoder is a differently initialised tiny BERT."""
    import shutil

    import torch
    from transformers import BertModel

    other = tmp_path / "other"
    shutil.copytree(tiny_dir, other)
    torch.manual_seed(123)
    m = BertModel.from_pretrained(str(tiny_dir))
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01 * torch.randn_like(p))
    m.save_pretrained(other)
    ds = tmp_path / "ds2"
    code, _, _ = _run(
        capsys,
        "surealm",
        "datastore",
        str(dialogue_file),
        "--out",
        str(ds),
        "--lm",
        str(tiny_dir),
        "--encoder",
        str(other),
        "--k",
        "3",
        "--m",
        "3",
        "--quiet",
    )
    assert code == 0
    for argv in (
        ["surealm", "evaluate", str(trained), "--datastore", str(ds), "--device", "cpu"],
        ["surealm", "generate", str(trained), "hello", "--datastore", str(ds), "--device", "cpu"],
    ):
        code, _, err = _run(capsys, *argv)
        assert (
            code == 2 and "built with another sentence encoder" in err and len(err.strip().splitlines()) == 1
        )


# ----------------------------------------------------------------------------- empty splits

SPLITS_HOW = (
    "splits are drawn by whole groups: --valid-frac and --test-frac of the groups (rounded; at least "
    "one group each from 3 groups up), the rest train; a text file starts a new group at each blank "
    "line, so a file without blank lines is one group; a JSONL line is a group of its own unless "
    'lines share a "group", and its "split" fixes its split; --sample chitchat: one group per '
    "conversation"
)
FILL = (
    'separate dialogues or paragraphs by blank lines, give JSONL with "group" or "split" fields, '
    "or raise --valid-frac/--test-frac"
)


@pytest.fixture(scope="module")
def ungrouped_store(tmp_path_factory, tiny_dir):
    """A data store built from a text file without blank lines: one group, all of it train."""
    d = tmp_path_factory.mktemp("ungrouped")
    plain = d / "plain.txt"
    plain.write_text(
        "i would like to book a room\nsure , for how many nights ?\ntwo nights please\n"
        "i would like to order a pizza\nwhat size would you like ?\na large one please\n",
        encoding="utf-8",
    )
    ds = d / "ds"
    code = main(
        [
            "surealm",
            "datastore",
            str(plain),
            "--out",
            str(ds),
            "--lm",
            str(tiny_dir),
            "--encoder",
            str(tiny_dir),
            "--k",
            "3",
            "--m",
            "3",
            "--quiet",
        ]
    )
    assert code == 0
    return plain, ds


def test_datastore_warns_about_each_empty_split(capsys, tmp_path, tiny_dir):
    plain = tmp_path / "plain.txt"
    plain.write_text("i would like to book a room\nsure , for how many nights ?\ntwo nights please\n")
    code, out, err = _run(
        capsys,
        "surealm",
        "datastore",
        str(plain),
        "--out",
        str(tmp_path / "ds"),
        "--lm",
        str(tiny_dir),
        "--encoder",
        str(tiny_dir),
        "--k",
        "3",
        "--m",
        "3",
        "--quiet",
    )
    assert code == 0 and out.splitlines()[-1] == f"data store: {tmp_path / 'ds'}"
    assert err.splitlines() == [
        f"ralm: warning: the valid split is empty: {plain} gave 1 group and {SPLITS_HOW}; "
        f"`ralm surealm train` will refuse this data store; to fill it, {FILL}",
        f"ralm: warning: the test split is empty: {plain} gave 1 group and {SPLITS_HOW}; "
        f"`ralm surealm evaluate --split test` will refuse it; to fill it, {FILL}",
    ]


def test_train_refuses_a_store_without_valid_sentences(capsys, tmp_path, tiny_dir, ungrouped_store):
    plain, ds = ungrouped_store
    code, out, err = _run(
        capsys,
        "surealm",
        "train",
        str(ds),
        "--out",
        str(tmp_path / "run"),
        "--lm",
        str(tiny_dir),
        "--k",
        "3",
        "--steps",
        "1",
        "--device",
        "cpu",
        "--quiet",
    )
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"ralm: error: {ds}: the valid split is empty: {plain} gave 1 group and {SPLITS_HOW}; training "
        f"keeps the model of lowest validation perplexity, so it needs valid sentences; rebuild the data "
        f"store: {FILL}"
    ]
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_an_empty_split_and_never_prints_a_perplexity(
    capsys, tmp_path, trained, ungrouped_store
):
    plain, ds = ungrouped_store
    for split in ("test", "valid"):
        code, out, err = _run(
            capsys,
            "surealm",
            "evaluate",
            str(trained),
            "--datastore",
            str(ds),
            "--split",
            split,
            "--device",
            "cpu",
        )
        assert code == 2 and out == ""
        assert err.splitlines() == [
            f"ralm: error: {ds}: the {split} split is empty: {plain} gave 1 group and {SPLITS_HOW}; there is "
            f"no {split} perplexity over 0 tokens; rebuild the data store ({FILL}) or evaluate another --split"
        ]
    code, out, err = _run(
        capsys,
        "surealm",
        "evaluate",
        str(trained),
        "--datastore",
        str(ds),
        "--split",
        "train",
        "--knnlm",
        str(trained),
        "--device",
        "cpu",
    )
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"ralm: error: {ds}: the valid split is empty: {plain} gave 1 group and {SPLITS_HOW}; --knnlm tunes "
        f"lambda and the temperature on the valid split; rebuild the data store ({FILL}) or leave out --knnlm"
    ]


def test_datastore_refuses_an_empty_train_split(capsys, tmp_path, tiny_dir):
    j = tmp_path / "held.jsonl"
    j.write_text(
        '{"text": "i would like to book a room", "split": "valid"}\n{"text": "two nights please", "split": "test"}\n'
    )
    code, out, err = _run(
        capsys,
        "surealm",
        "datastore",
        str(j),
        "--out",
        str(tmp_path / "ds"),
        "--lm",
        str(tiny_dir),
        "--encoder",
        str(tiny_dir),
        "--quiet",
    )
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"ralm: error: the train split is empty: {j} gave 2 groups and {SPLITS_HOW}; the data store is built "
        'from the training sentences, so it needs some: give JSONL lines without "split" or with "split": '
        '"train", or lower --valid-frac/--test-frac'
    ]
    assert not (tmp_path / "ds").exists()


def test_perplexity_over_no_tokens_is_nan():
    import math

    from ralm.surealm.data import PerplexityCounts

    c = PerplexityCounts()
    assert math.isnan(c.token_ppl) and math.isnan(c.word_ppl)
    assert PerplexityCounts(nll=2.0, tokens=2, words=1).token_ppl == pytest.approx(math.e)


# ----------------------------------------------------------------------------- help


def _subcommands(parser):
    import argparse

    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def test_every_surealm_option_has_help_with_its_default_and_choices():
    import argparse

    from ralm.cli import build_parser

    subs = _subcommands(_subcommands(build_parser())["surealm"])
    assert sorted(subs) == ["datastore", "evaluate", "generate", "train"]
    for name, p in subs.items():
        fmt = p._get_formatter()
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            text = fmt._expand_help(a) if a.help else ""
            assert text.strip(), f"surealm {name} {a.option_strings or a.dest}: no help"
            if a.option_strings:
                assert "default" in text, f"surealm {name} {a.option_strings}: no default in {text!r}"
            if a.default is False:  # a switch
                assert "(default: off" in text, f"surealm {name} {a.option_strings}: {text!r}"
            elif a.default is not None:
                assert f"(default: {a.default}" in text, f"surealm {name} {a.option_strings}: {text!r}"
            for c in a.choices or ():
                assert str(c) in text, f"surealm {name} {a.option_strings}: choice {c!r} not in {text!r}"


@pytest.mark.parametrize("command", ["datastore", "train", "evaluate"])
def test_help_says_how_groups_and_splits_are_formed(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main(["surealm", command, "--help"])
    assert exc.value.code == 0
    assert f"S{SPLITS_HOW[1:]}." in " ".join(capsys.readouterr().out.split())


def test_index_kinds_offered_are_the_index_kinds():
    from ralm.retrieval.index.plan import KINDS
    from ralm.surealm.cli import INDEX_KINDS

    assert INDEX_KINDS == KINDS


def test_decoding_options_read_the_command_line_and_the_api_request_alike():
    from ralm.cli import build_parser
    from ralm.serve.schemas import GenerateRequest
    from ralm.surealm.cli import decoding_options

    args = build_parser().parse_args(
        ["surealm", "generate", "run", "i would", "--strategy", "beam", "--beams", "3", "--num-return", "2"]
    )
    req = GenerateRequest(prefix="i would", strategy="beam", num_beams=3, num_return=2)
    want = {
        "strategy": "beam",
        "max_new_tokens": 20,
        "top_p": 0.9,
        "temperature": 1.0,
        "num_beams": 3,
        "num_return_sequences": 2,
        "seed": 0,
    }
    assert decoding_options(args) == decoding_options(req) == want
