"""Downstream tasks: read datasets, fine-tune readers with or without retrieval, score, tabulate.

`ralm finetune TASK DATA --model M --out DIR` (see `ralm.tasks.finetune`) and `ralm table`.
"""
