"""A REALM/BRENT pre-training run: building it, its run folder, the training loop and its extra objectives."""
