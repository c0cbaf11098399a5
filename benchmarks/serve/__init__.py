"""`ralm serve`: batching under load, what a request costs in a batch, the README's screenshots."""
