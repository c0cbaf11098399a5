"""LoRA adapters (peft) put into a model in place, and folded back into its base layers."""

from __future__ import annotations

from ralm.errors import RalmError

__all__ = ["add_lora", "merge_lora"]


def add_lora(model, r: int, alpha: int | None = None):
    """LoRA adapters (peft) on every linear layer of `model` but its output layer, in place: the
    model keeps its class (its own forward, `base_model` and output layer); only the adapters
    train. alpha defaults to 2r."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise RalmError("LoRA needs peft: pip install peft (in ralm's [rag] extra)") from None
    cfg = LoraConfig(r=r, lora_alpha=alpha or 2 * r, lora_dropout=0.0, target_modules="all-linear")
    head = model.get_output_embeddings()
    names = [n for n, m in model.named_modules() if m is head]
    if names:
        cfg.exclude_modules = names
    model = inject_adapter_in_model(cfg, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def merge_lora(model):
    """Fold LoRA adapters into their base layers and remove them (a plain model again); in place."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return model
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], module.get_base_layer())
    return model
