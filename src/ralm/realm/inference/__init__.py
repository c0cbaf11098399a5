"""What a trained REALM run answers: held-out perplexity, fills, the gold tables, diagnosis, export, plots."""
