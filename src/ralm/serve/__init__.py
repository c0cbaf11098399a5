"""`ralm serve`: a local web app and JSON API over ralm artifacts (being built)."""
