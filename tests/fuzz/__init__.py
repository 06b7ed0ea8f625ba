"""Long parser fuzzers, not part of CI: `python -m tests.fuzz.fuzz_parsers` (hypothesis) and
`python -m tests.fuzz.fuzz_atheris` (atheris, coverage-guided)."""
