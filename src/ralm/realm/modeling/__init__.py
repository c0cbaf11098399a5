"""REALM's model: the retriever's prior over the documents, the marginal likelihood, the candidates, the answer target."""
