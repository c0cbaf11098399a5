"""`ralm serve`: a local web app and JSON API over ralm artifacts (REALM and SUREALM runs, index
directories, DocStores).

Modules: loaders (what TARGET is; loading it once), api (the JSON API under /api), pages (the
Jinja2 pages), app (`create_app`, error handling, `ServerThread`), markup (what to highlight),
runs (metrics.jsonl and run status), schemas (request/response models and caps), cli.
"""
