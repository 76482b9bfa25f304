"""What several benchmarks share. A folder beside them, not among them: ``tests/test_benchmarks.py``
runs every ``benchmarks/*.py`` as a benchmark."""
