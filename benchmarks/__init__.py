"""The benchmark scripts, one folder per area; each runs from the repository root as
`python -m benchmarks.AREA.NAME` and writes benchmarks/results/NAME.json (`common.py`)."""
