"""REALM's readers: the masked-LM reader and the causal reader, log p(y | x, z) of the masked spans."""
