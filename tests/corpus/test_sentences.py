from ralm.corpus.sentences import sentence_boundaries, split_sentences


def texts(text):
    return [text[a:b] for a, b in split_sentences(text)]


def test_docstring_example():
    assert split_sentences("Dr. Who left. Then rain fell!\nNew line") == [(0, 13), (14, 29), (30, 38)]


def test_english_abbreviations_initials_and_quotes():
    t = 'Mr. Smith met J. R. R. Tolkien in 1950. "Nice!" he said. Then e.g. nothing. (Quiet.) End'
    assert texts(t) == [
        "Mr. Smith met J. R. R. Tolkien in 1950.",
        '"Nice!" he said.',
        "Then e.g. nothing.",
        "(Quiet.)",
        "End",
    ]


def test_norwegian_dates_and_abbreviations_do_not_split():
    t = "Han kom 12. april 1861 til Oslo. Det var bl.a. kaldt. «Hei!» sa han. Slutt."
    assert texts(t) == [
        "Han kom 12. april 1861 til Oslo.",
        "Det var bl.a. kaldt.",
        "«Hei!» sa han.",
        "Slutt.",
    ]


def test_lines_are_boundaries_and_blank_lines_skipped():
    t = "Heading\n\n  First para. Second one.\nItem"
    assert texts(t) == ["Heading", "First para.", "Second one.", "Item"]
    assert sentence_boundaries(t)[1] == t.index("First")


def test_cjk_full_stop_and_no_punctuation():
    assert texts("東京は首都です。大阪も大きい。") == ["東京は首都です。大阪も大きい。"]  # no space after 。
    assert texts("東京は首都です。 大阪も大きい。") == ["東京は首都です。", "大阪も大きい。"]
    assert texts("no punctuation at all here") == ["no punctuation at all here"]
    assert split_sentences("") == [] and split_sentences("   \n ") == []
