"""Models from names, directories and GGUF files, for every role in ralm; precision and LoRA.

The one place where ralm turns a model argument into loaded `transformers` objects (every
`from_pretrained` call of ralm is in this package). One concept per module:

    names           what an argument names: the bundled MiniLM ("minilm"), short LM names
                    ("gemma3", "smollm2"), GGUF files, local directories; causal or encoder
    quiet           transformers' warnings and progress bars off while loading
    tokenizers      fast tokenizers of a directory or an LM spec, tokenizer fingerprints
    causal          causal LMs: `load_causal_lm` (decoder-only, checked), `load_as_causal_lm`
                    (SUREALM: encoders run as decoders)
    encoder         tower backbones (`load_encoder`), masked LMs (`load_masked_lm`), task heads
                    and saved task models (`load_auto`)
    decoder_body    a decoder-only LM's body as an encoder: loading, positions, pooling
    position_logits a causal LM's logits at chosen positions only
    save            saving a causal LM (GGUF-loaded ones too) as a transformers directory
    lora            LoRA adapters in and out
    precision       bf16 autocast where it pays, eval mode

`ralm.models` imports no other ralm package (only ralm's top-level shared modules), and nothing
here is imported by `import ralm`: torch and transformers load on first use.
"""
