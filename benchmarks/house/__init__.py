"""The code's own shape, measured from the code (`code_layout.py`)."""
