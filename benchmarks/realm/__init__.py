"""REALM/BRENT pre-training: quality against the MLM-only or closed-book baseline, step speed, scale."""
