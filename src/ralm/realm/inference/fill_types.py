"""What a fill answers (REALM's Table 3): `FillDoc` per retrieved document and `FillResult` with the
marginal prediction; shared by the masked-LM fill (`ralm.realm.inference.fill`) and the causal one
(`ralm.realm.inference.causal_fill`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FillDoc", "FillResult"]


@dataclass
class FillDoc:
    """One retrieved document (chunk_id -1 = the null document) and the reader's guess given it."""

    chunk_id: int
    title: str
    text: str
    p_z: float
    prediction: list[str]
    p_y: float


@dataclass
class FillResult:
    """`fill`'s answer: the query, the documents (best p(z|x) first, null last), the marginal guess."""

    text: str
    docs: list[FillDoc]
    prediction: list[str]
    p_y: float
    alternatives: list[list[tuple[str, float]]] = field(default_factory=list)  # per mask: top tokens, p

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "prediction": self.prediction,
            "p_y": self.p_y,
            "alternatives": self.alternatives,
            "docs": [d.__dict__ for d in self.docs],
        }

    def format(self, width: int = 100) -> str:
        """REALM Table 3 as text: one block per document, then the marginal prediction."""
        lines = [f"x: {self.text}", ""]
        for d in self.docs:
            name = "(null document)" if d.chunk_id < 0 else f"[{d.chunk_id}] {d.title}"
            lines.append(f"p(z|x) = {d.p_z:.4f}  {name}")
            if d.chunk_id >= 0:
                snippet = d.text if len(d.text) <= width else d.text[: width - 3] + "..."
                lines.append(f"    {snippet}")
            lines.append(f"    prediction: {' | '.join(d.prediction)}   p(y|z,x) = {d.p_y:.4g}")
        lines.append("")
        lines.append(f"marginal: {' | '.join(self.prediction)}   p(y|x) = {self.p_y:.4g}")
        for j, alts in enumerate(self.alternatives):
            lines.append(f"  mask {j + 1}: " + ", ".join(f"{t} {p:.3f}" for t, p in alts))
        return "\n".join(lines)
