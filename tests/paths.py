"""Where the repository, the copied real captures and the fake Slurm commands are, for tests at any depth."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
FAKES = ROOT / "tests" / "fakes"
