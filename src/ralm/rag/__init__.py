"""Retrieval-augmented generation for question answering: a causal LM answers from retrieved passages.

`ralm rag eval` scores a generator closed-book, with the top-k passages in its prompt (RAG),
ensembled over passages (REPLUG) or with the gold passage (oracle); `ralm rag train` fine-tunes
the generator on (question + passages -> answer) with the loss on the answer alone (full or LoRA);
`ralm rag lsr` trains a dense retriever's query tower from the LM's preferences (REPLUG LSR).

Modules: `data` (questions, gold passages), `retrieved` (passages per question, saved portable),
`prompt` (prompt assembly and truncation), `generate` (batched greedy decoding, REPLUG mixing),
`scoring` (EM/F1/regex/contains, answer recall), `evaluate` (one mode over a question set),
`finetune` (generator training), `lsr` (LM-supervised retrieval), `cli`.
"""
