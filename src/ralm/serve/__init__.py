"""`ralm serve`: a local web app and JSON API over ralm artifacts (REALM and SUREALM runs, index
directories, DocStores).

Modules: loaders (what TARGET is; loading it once), api (the JSON API under /api), batching
(per-model queues that run concurrent requests as one batch), batched (the search and fill model
calls for a batch, and a TARGET's queues), pages (the Jinja2 pages), app (`create_app`, error
handling, `ServerThread`), markup (what to highlight), runs (metrics.jsonl and run status),
schemas (request/response models and caps), cli.
"""
