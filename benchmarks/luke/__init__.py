"""LUKE/DaLUKE: NER rows at CPU scale, the pre-training step's speed, where entities help."""
