"""Readers of the dataset file formats, one module per format family; `ralm.tasks.datasets` picks one.

Every reader is `read_X(path, text, task, counts) -> list of examples` (the types of
`ralm.formats.types`): `text` is the decoded file (`common.read_text`), `counts` a Counter of what the
reader repaired or dropped, which `common.format_notes` turns into notes. Ids are made unique and
empty files refused by the caller. `read_openqa` also takes `answers` (auto, string or regex).

    squad   SQuAD v1.1 JSON (`squad.read_squad`)
    conllu  CoNLL-U and NorNE's NDT files (`conll.read_conllu`)
    conll   token/tag columns (`conll.read_conll`)
    text    classification lines, TSV, JSONL or JSON list (`text.read_text_examples`)
    openqa  open-QA JSONL, JSON list or DPR TSV (`openqa.read_openqa`)

Deliberately left out: picking the format, splits and directories (`ralm.tasks.datasets`).
"""
