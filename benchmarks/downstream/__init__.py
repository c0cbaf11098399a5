"""Fine-tuning on downstream tasks (BRENT Table 1, REALM Table 2's open QA) and its step speed."""
